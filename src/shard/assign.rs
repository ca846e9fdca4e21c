//! Who owns what in a sharded election: the assignment of shards to members, bounded-load
//! rendezvous hashing with XXH3 (README, "Shards"). Pure: every replica computes the same
//! assignment from the same members, whatever its version.

use xxhash_rust::xxh3::xxh3_64;

/// Which member each shard goes to (its **target**), from one list of members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The members, ordered by identity, without repeats.
    members: Vec<String>,
    /// Per shard, the index of its target in `members` (`None`: every member is full).
    targets: Vec<Option<usize>>,
    /// The most shards one member may own.
    cap: u32,
}

impl Assignment {
    /// The assignment of `shards` shards of the election `name` to `members` (in any order;
    /// a repeated identity counts once). Each member owns at most `ceil(shards / M)` shards,
    /// or `max_per_member` when that is non-zero and smaller. For each shard `s` in order,
    /// the members are ranked by the XXH3-64 (seed 0) of `<name>\n<s>\n<identity>`, highest
    /// first (ties: smaller identity), and `s` goes to the first that owns fewer than the cap.
    pub fn compute<S: AsRef<str>>(
        name: &str,
        shards: u32,
        members: &[S],
        max_per_member: u32,
    ) -> Assignment {
        let mut members: Vec<String> = members.iter().map(|m| m.as_ref().to_owned()).collect();
        members.sort();
        members.dedup();
        let cap = cap(shards, members.len(), max_per_member);
        let mut owned = vec![0u32; members.len()];
        let mut key = Vec::with_capacity(name.len() + 64);
        let targets = (0..shards)
            .map(|s| {
                let best = best_with_room(name, s, &members, &owned, cap, &mut key)?;
                owned[best] += 1;
                Some(best)
            })
            .collect();
        Assignment {
            members,
            targets,
            cap,
        }
    }

    /// How many shards there are.
    pub fn shards(&self) -> u32 {
        self.targets.len() as u32
    }

    /// The members, ordered by identity.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The most shards one member may own (0 without members).
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// Shard `s`'s target; `None` without members, when every member is full, or out of range.
    pub fn target(&self, shard: u32) -> Option<&str> {
        let index = (*self.targets.get(shard as usize)?)?;
        Some(&self.members[index])
    }

    /// The shards whose target is `identity`, in order.
    pub fn shards_of(&self, identity: &str) -> Vec<u32> {
        (0..self.shards())
            .filter(|&s| self.target(s) == Some(identity))
            .collect()
    }

    /// How many shards each member is the target of, in the order of [`Self::members`].
    pub fn loads(&self) -> Vec<u32> {
        let mut loads = vec![0; self.members.len()];
        for index in self.targets.iter().flatten() {
            loads[*index] += 1;
        }
        loads
    }

    /// The shards whose target differs between `self` and `other` (compared by identity).
    pub fn moved_from(&self, other: &Assignment) -> Vec<u32> {
        let shards = self.shards().max(other.shards());
        (0..shards)
            .filter(|&s| self.target(s) != other.target(s))
            .collect()
    }
}

/// `ceil(shards / members)`, or `max_per_member` when non-zero and smaller; 0 without members.
fn cap(shards: u32, members: usize, max_per_member: u32) -> u32 {
    if members == 0 {
        return 0;
    }
    let fair = shards.div_ceil(u32::try_from(members).unwrap_or(u32::MAX));
    match max_per_member {
        0 => fair,
        max => fair.min(max),
    }
}

/// The member ranked first for shard `s` among those owning fewer than `cap` shards:
/// highest hash, then smaller identity (the members are ordered, so the first seen wins).
fn best_with_room(
    name: &str,
    shard: u32,
    members: &[String],
    owned: &[u32],
    cap: u32,
    key: &mut Vec<u8>,
) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (index, identity) in members.iter().enumerate() {
        if owned[index] >= cap {
            continue;
        }
        let score = rank_hash(name, shard, identity, key);
        if best.is_none_or(|(top, _)| score > top) {
            best = Some((score, index));
        }
    }
    best.map(|(_, index)| index)
}

/// XXH3-64 (seed 0) of the UTF-8 bytes `<name>\n<shard>\n<identity>`.
pub(crate) fn rank_hash(name: &str, shard: u32, identity: &str, key: &mut Vec<u8>) -> u64 {
    use std::io::Write;
    key.clear();
    key.extend_from_slice(name.as_bytes());
    let _ = write!(key, "\n{shard}\n");
    key.extend_from_slice(identity.as_bytes());
    xxh3_64(key)
}

#[cfg(test)]
#[path = "assign_tests.rs"]
mod tests;
