//! Semaphores and reader-writer locks under restarts, and a semaphore that
//! counts holders per node (flagged).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_rwlock_windows_hold_their_rules_while_nodes_restart() {
    // Persistent nodes, one at a time killed and restarted at once.
    let nodes =
        Arc::new(RedisNodes::start_with(5, ServerOptions::new().persistent()).expect("nodes"));
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(10))
                .wait(Duration::from_secs(60)),
        )
        .build()
        .expect("config");
    let ttl = Duration::from_secs(3);
    let recorder = Recorder::new();
    let done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (nodes, done) = (nodes.clone(), done.clone());
        // Every node once, then some: the holders keep going until then.
        tokio::spawn(async move {
            for restart in 0..8 {
                let i = restart % nodes.len();
                nodes[i].kill();
                tokio::time::sleep(Duration::from_millis(100)).await;
                nodes[i].restart().expect("restart");
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    const PERMITS: usize = 3;
    let mut tasks = Vec::new();
    for client in 0..15 {
        let (semaphore, recorder) = (
            locks.semaphore("chaos:sem", PERMITS as u32),
            recorder.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                // Held from when the call returned until release was called.
                let attempt = recorder.lock(client, "chaos:sem");
                let guard = semaphore
                    .acquire(ttl)
                    .await
                    .expect("a permit, sooner or later");
                let mut section = attempt.granted(&guard.lease(), ttl);
                section.share(Share::Permit(PERMITS));
                tokio::time::sleep(Duration::from_millis(5)).await;
                section.end();
                guard.release().await.expect("release with a majority up");
            }
        }));
    }
    for client in 0..10 {
        let (lock, recorder) = (locks.rwlock("chaos:rw"), recorder.clone());
        let writer = client % 3 == 0;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0;
            while rounds < 2 || !done.load(Ordering::SeqCst) {
                rounds += 1;
                let attempt = recorder.lock(client, "chaos:rw");
                let guard = if writer {
                    lock.write(ttl).await.map(LockGuard::from)
                } else {
                    lock.read(ttl).await.map(LockGuard::from)
                }
                .expect("a hold, sooner or later");
                let mut section = attempt.granted(&guard.lease(), ttl);
                section.share(if writer { Share::Alone } else { Share::Reader });
                tokio::time::sleep(Duration::from_millis(5)).await;
                section.end();
                guard.release().await.expect("release with a majority up");
            }
        }));
    }
    let granted = || recorder.grants();
    for task in tasks {
        support::no_stall("the tasks", granted, task)
            .await
            .expect("task");
    }
    chaos.await.expect("chaos");
    let history = recorder.take();
    for (resource, tasks) in [("chaos:sem", 15), ("chaos:rw", 10)] {
        let grants = history
            .grants
            .iter()
            .filter(|g| g.resource == resource)
            .count();
        assert!(grants >= 2 * tasks, "{resource}: {grants}");
    }
    let verdict = check(&history);
    assert!(verdict.is_ok(), "{verdict}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_counting_holders_per_node_is_flagged_and_ours_refuses_the_third() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let ttl = Duration::from_secs(10);
    // The naive design: each node admits up to 2 holders of any token, a
    // holder needs a majority. A on nodes {0, 1}, B on {1, 2}, C on {0, 2}.
    let admit = redis::Script::new(
        "if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then \
           redis.call('SADD', KEYS[1], ARGV[1]) return 1 end return 0",
    );
    let recorder = Recorder::new();
    for (client, on) in [[0, 1], [1, 2], [0, 2]].into_iter().enumerate() {
        let token = format!("naive-token-{client}");
        let t_inv = Instant::now();
        let mut yes = 0;
        for i in on {
            let mut c = support::conn(&nodes[i].url()).await;
            let admitted: i64 = admit
                .key("naive")
                .arg(&token)
                .arg(2)
                .invoke_async(&mut c)
                .await
                .expect("admit");
            yes += admitted;
        }
        assert_eq!(yes, 2, "a majority of 3");
        // Held from the majority's yes for the ttl from the first request.
        let from = recorder.at(t_inv);
        recorder.grant(Grant {
            granted: recorder.now(),
            share: Share::Permit(2),
            token: token.chars().take(4).collect(),
            ..Grant::new(client, "naive", from, from + ttl)
        });
    }
    let verdict = check(&recorder.take());
    assert!(
        verdict.violations.iter().any(|v| matches!(
            v,
            Violation::TooManyHolders { open, .. } if open.len() + 1 == 3
        )),
        "the checker missed three holders of two permits: {verdict}"
    );
    // quorumlock's semaphore, the same three clients on the same nodes:
    // the third is refused.
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(2))
        .retry(Retry::none())
        .build()
        .expect("config");
    let a = locks
        .semaphore("ours", 2)
        .try_acquire(ttl)
        .await
        .expect("A");
    let b = locks
        .semaphore("ours", 2)
        .try_acquire(ttl)
        .await
        .expect("B");
    assert!(matches!(
        locks.semaphore("ours", 2).try_acquire(ttl).await,
        Err(Error::Contended { .. })
    ));
    a.release().await.expect("release");
    b.release().await.expect("release");
}
