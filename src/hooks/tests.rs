use super::*;

fn config(yaml: &str) -> Config {
    let base = "name: e\nidentity: a\n";
    crate::config::load_from_str(&format!("{base}{yaml}"), &Default::default(), &|k| {
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
    let text = metrics.render(&crate::state::Snapshot::starting(true), Instant::now());
    assert!(
        text.contains(
            "leaderd_hook_runs_total{hook=\"on_acquired\",name=\"e\",result=\"dropped\"} 3"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_with_its_group() {
    let started = Instant::now();
    let cmd = ["sh".to_string(), "-c".into(), "sleep 30 & sleep 30".into()];
    let outcome = process::run(&cmd, &[], tokio::time::sleep(Duration::from_millis(200))).await;
    assert!(matches!(outcome, process::Outcome::TimedOut), "{outcome:?}");
    assert_eq!(outcome.code(), 137);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn exit_codes_and_start_failures_are_reported() {
    let later = || tokio::time::sleep(Duration::from_secs(10));
    let fail = ["sh".to_string(), "-c".into(), "exit 3".into()];
    assert!(matches!(
        process::run(&fail, &[], later()).await,
        process::Outcome::Exited(3)
    ));
    let missing = ["/nonexistent/hook".to_string()];
    let not_started = process::run(&missing, &[], later()).await;
    assert!(matches!(not_started, process::Outcome::NotStarted(_)));
    assert_eq!(not_started.code(), 127);
    let killed = ["sh".to_string(), "-c".into(), "kill -TERM $$".into()];
    assert_eq!(process::run(&killed, &[], later()).await.code(), 128 + 15);
}
