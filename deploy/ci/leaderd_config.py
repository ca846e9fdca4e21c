# Checks a leaderd config.yaml against README.md#configuration (known keys, types,
# enums, durations and the timing rules), so the example configs under deploy/ are valid without
# needing a built leaderd. Used by check_k8s.py (ConfigMaps) and by .ci/check-deploy (systemd).
#
#   python3 deploy/ci/leaderd_config.py FILE [--env VAR ...] [--exec]
#
# --env names the variables the environment provides (for ${VAR} references); --exec says the
# command line gives an exec-mode command (`-- COMMAND`). Exit 0 when valid, 1 with one line per
# problem otherwise. It mirrors the documentation, not leaderd's code: keep both in step.
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, Callable

import yaml

DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
SIGNALS = {
    "SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGKILL", "SIGWINCH",
}
LEVELS = {"trace", "debug", "info", "warn", "error"}

# Key tree of the documented configuration: a dict is a section, anything else the checker of a
# leaf.
Checker = Callable[[str, Any], "str | None"]


def parse_duration(value: Any) -> float | None:
    """Seconds of a documented duration (`250ms`, `2s`, `1m30s`), or None when malformed."""
    if not isinstance(value, str) or not value:
        return None
    m = DURATION_RE.match(value)
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000.0


def _duration(key: str, v: Any) -> str | None:
    if parse_duration(v) is None:
        return f"{key}: {v!r} is not a duration (write it like 250ms, 2s, 1m30s)"
    if parse_duration(v) == 0:
        return f"{key}: {v!r} must be longer than zero"
    return None


def _enum(*allowed: str) -> Checker:
    def check(key: str, v: Any) -> str | None:
        if v not in allowed:
            return f"{key}: {v!r} is not one of {', '.join(allowed)}"
        return None
    return check


def _string(nullable: bool = False, empty: bool = True) -> Checker:
    def check(key: str, v: Any) -> str | None:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            return f"{key}: {v!r} is not a string" + (" or null" if nullable else "")
        if not empty and not v:
            return f"{key}: must not be empty"
        return None
    return check


def _bool(key: str, v: Any) -> str | None:
    return None if isinstance(v, bool) else f"{key}: {v!r} is not true or false"


def _int(minimum: int) -> Checker:
    def check(key: str, v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            return f"{key}: {v!r} is not an integer >= {minimum}"
        return None
    return check


def _int_range(minimum: int, maximum: int) -> Checker:
    def check(key: str, v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
            return f"{key}: {v!r} is not an integer in {minimum}..{maximum}"
        return None
    return check


def _number(key: str, v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"{key}: {v!r} is not a number"
    return None


def _redis_url(key: str, v: Any) -> str | None:
    if not isinstance(v, str) or not re.match(r"^rediss?://[^/\s]+(/\d+)?$", v):
        return f"{key}: {v!r} is not a redis:// or rediss:// URL"
    return None


def _url_list(key: str, v: Any) -> str | None:
    if not isinstance(v, list):
        return f"{key}: {v!r} is not a list of URLs"
    for i, u in enumerate(v):
        err = _redis_url(f"{key}[{i}]", u)
        if err:
            return err
    return None


def _string_list(key: str, v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"{key}: {v!r} is not a list of strings"
    return None


def _http_addr(key: str, v: Any) -> str | None:
    if v == "":
        return None
    if not isinstance(v, str) or not re.match(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]*):(\d{1,5})$", v):
        return f"{key}: {v!r} is not host:port (or the empty string for no HTTP server)"
    if not 0 < int(v.rsplit(":", 1)[1]) < 65536:
        return f"{key}: {v!r} has a port outside 1-65535"
    return None


def _name(key: str, v: Any) -> str | None:
    if not isinstance(v, str) or not NAME_RE.match(v):
        return f"{key}: {v!r} must be 1-200 characters of [A-Za-z0-9._-]"
    return None


SCHEMA: dict[str, Any] = {
    "name": _name,
    "identity": _string(empty=False),
    "redis": {
        "mode": _enum("single", "sentinel", "redlock", "cluster"),
        "url": _redis_url,
        "urls": _url_list,
        "sentinels": _url_list,
        "master_name": _string(empty=False),
        "username": _string(nullable=True),
        "password_file": _string(nullable=True),
        "key_prefix": _string(),
        "connect_timeout": _duration,
        "command_timeout": _duration,
        "min_replicas_ack": _int(0),
    },
    "election": {
        "lease_duration": _duration,
        "renew_deadline": _duration,
        "retry_period": _duration,
        "jitter": _number,
        "release_on_shutdown": _bool,
        "on_lost": _enum("contend", "exit"),
        "shards": _int_range(0, 4096),
        "max_shards_per_replica": _int(0),
        "health_check": {
            "http_get": _string(nullable=True),
            "command": _string_list,
            "period": _duration,
            "timeout": _duration,
            "failures": _int(1),
        },
    },
    "publish": {
        "http_addr": _http_addr,
        "leader_file": _string(),
        "ready_when": _enum("leader", "always"),
        "advertise": _string(nullable=True),
    },
    "exec": {
        "command": _string_list,
        "stop_signal": _enum(*sorted(SIGNALS)),
        "grace_period": _duration,
        "on_exit": _enum("release", "exit"),
    },
    "logging": {
        "format": _enum("text", "json"),
        "level": _enum(*sorted(LEVELS)),
    },
    "hooks": {
        "on_acquired": _string_list,
        "on_stepped_down": _string_list,
        "on_leader_changed": _string_list,
        "timeout": _duration,
    },
    "proxy": {
        "listen": _http_addr,
        "upstream": _http_addr,
        "on_change": _enum("close", "keep"),
        "connect_timeout": _duration,
        "max_connections": _int(1),
    },
}

DEFAULTS = {
    ("redis", "mode"): "single",
    ("redis", "command_timeout"): "500ms",
    ("redis", "connect_timeout"): "1s",
    ("election", "lease_duration"): "15s",
    ("election", "renew_deadline"): "10s",
    ("election", "retry_period"): "2s",
    ("election", "jitter"): 0.2,
    ("publish", "http_addr"): "0.0.0.0:9090",
    ("publish", "leader_file"): "/var/run/leaderd/leader.json",
    ("publish", "ready_when"): "leader",
    ("exec", "grace_period"): "3s",
}


def expand(value: Any, env: dict[str, str] | None, path: str, problems: list[str]) -> Any:
    """Replace ${VAR} as leaderd does; with env None every variable counts as set."""
    if isinstance(value, dict):
        return {k: expand(v, env, f"{path}.{k}" if path else str(k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, env, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            var = m.group(1)
            if env is None:
                return f"x{var.lower()}"
            if var not in env:
                problems.append(f"{path}: ${{{var}}} is not set in the environment that runs leaderd")
                return ""
            return env[var]
        return VAR_RE.sub(sub, value)
    return value


def _walk(doc: Any, schema: dict[str, Any], path: str, problems: list[str]) -> None:
    if not isinstance(doc, dict):
        problems.append(f"{path or 'config'}: expected a mapping, found {type(doc).__name__}")
        return
    for key, value in doc.items():
        full = f"{path}.{key}" if path else str(key)
        if key not in schema:
            near = difflib.get_close_matches(str(key), list(schema), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(f"{full}: unknown key{hint}")
            continue
        sub = schema[key]
        if isinstance(sub, dict):
            if value is None:
                continue
            _walk(value, sub, full, problems)
        else:
            err = sub(full, value)
            if err:
                problems.append(err)


def get(doc: dict[str, Any], section: str, key: str) -> Any:
    sec = doc.get(section) or {}
    if isinstance(sec, dict) and key in sec:
        return sec[key]
    return DEFAULTS.get((section, key))


def check_config(raw: Any, env: dict[str, str] | None = None, exec_used: bool = False) -> list[str]:
    """Every problem of one config document, one line each (empty: valid)."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        return ["config: the file is not a YAML mapping"]
    doc = expand(raw, env, "", problems)
    _walk(doc, SCHEMA, "", problems)
    if "name" not in doc:
        problems.append("name: required (1-200 characters of [A-Za-z0-9._-])")
    if problems:
        return problems

    mode = get(doc, "redis", "mode")
    redis = doc.get("redis") or {}
    urls = redis.get("urls") or []
    if mode == "single" and not redis.get("url"):
        problems.append("redis.url: required with redis.mode single")
    if mode == "redlock" and (len(urls) < 3 or len(urls) % 2 == 0):
        problems.append(f"redis.urls: redlock needs an odd number >= 3 of urls, found {len(urls)}")
    if mode == "cluster" and not urls:
        problems.append("redis.urls: cluster needs at least one seed node")
    if mode == "sentinel" and (not redis.get("sentinels") or not redis.get("master_name")):
        problems.append("redis.sentinels, redis.master_name: both required with redis.mode sentinel")

    lease = parse_duration(get(doc, "election", "lease_duration"))
    renew = parse_duration(get(doc, "election", "renew_deadline"))
    retry = parse_duration(get(doc, "election", "retry_period"))
    jitter = get(doc, "election", "jitter")
    cmd_timeout = parse_duration(get(doc, "redis", "command_timeout"))
    assert lease is not None and renew is not None and retry is not None and cmd_timeout is not None
    if not 0 <= jitter <= 1:
        problems.append(f"election.jitter: {jitter} is outside 0..1")
    if not lease > renew > retry * (1 + jitter):
        problems.append(
            "election: lease_duration > renew_deadline > retry_period * (1 + jitter) does not hold "
            f"({lease}s, {renew}s, {retry}s * {1 + jitter})")
    if not cmd_timeout < retry:
        problems.append(f"redis.command_timeout: {cmd_timeout}s must be shorter than retry_period {retry}s")

    exec_cmd = get(doc, "exec", "command") or []
    if exec_used or exec_cmd:
        grace = parse_duration(get(doc, "exec", "grace_period"))
        assert grace is not None
        if not grace < lease - renew:
            problems.append(
                f"exec.grace_period: {grace}s must be shorter than lease_duration - renew_deadline "
                f"({lease - renew}s)")
    elif isinstance(doc.get("exec"), dict) and doc["exec"]:
        problems.append("exec: set, but no command is given (exec.command or `-- COMMAND`)")
    if (get(doc, "election", "shards") or 0) > 0 and get(doc, "proxy", "listen"):
        problems.append("proxy.listen: not with election.shards (the proxy is not shard-aware)")
    hc = get(doc, "election", "health_check")
    if isinstance(hc, dict) and hc:
        if not hc.get("http_get") and not hc.get("command"):
            problems.append("election.health_check: needs http_get or command")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    ap.add_argument("--env", action="append", default=[], help="a variable the environment sets")
    ap.add_argument("--exec", action="store_true", help="an exec-mode command is given with --")
    args = ap.parse_args()
    with open(args.file, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    problems = check_config(raw, {v: f"x{v.lower()}" for v in args.env}, args.exec)
    for p in problems:
        print(f"{args.file}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
