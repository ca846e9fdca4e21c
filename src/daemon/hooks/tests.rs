use super::*;

fn config(yaml: &str) -> Config {
    let base = "name: e\nidentity: a\n";
    crate::daemon::config::load_from_str(&format!("{base}{yaml}"), &Default::default(), &|k| {
        std::env::var(k)
    })
    .expect("valid config")
}

fn event(hook: Hook, fence: u64) -> HookEvent {
    HookEvent {
        hook,
        fence: Some(fence),
        leader: None,
        reason: None,
        valid_until_ms: None,
        shard: None,
    }
}

#[test]
fn a_full_queue_drops_the_oldest_waiting_and_counts_it() {
    let metrics = Arc::new(Metrics::new("e", "0"));
    let cfg = config("hooks:\n  on_acquired: [\"true\"]\n");
    let (sink, _runner) = hooks(&cfg, metrics.clone());
    for fence in 0..(QUEUE_BOUND as u64 + 3) {
        sink.push(event(Hook::Acquired, fence));
    }
    sink.push(event(Hook::LeaderChanged, 999)); // not configured: ignored
    assert_eq!(sink.next().map(|e| e.fence), Some(Some(3)));
    let text = metrics.render(
        &crate::daemon::state::Snapshot::starting(true),
        Instant::now(),
    );
    assert!(
        text.contains(
            "leaderd_hook_runs_total{hook=\"on_acquired\",name=\"e\",result=\"dropped\"} 3"
        ),
        "{text}"
    );
}
