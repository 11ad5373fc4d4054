//! How many heap allocations the client makes per lock cycle (lock, then
//! release) on five nodes, counted by a counting allocator
//! (`allocation-counter`), not timed: allocations are a large share of the
//! client's CPU per cycle (issue #55), and this test holds the count so
//! that it only goes down.
//!
//! Its own test binary, because the counting allocator is the process's
//! global allocator. The runtime is current-thread, so every allocation of
//! the cycles (the calls, the connections' tasks, the background
//! follow-ups) is made on the thread that is measured.
#![cfg(feature = "testkit")]

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock::testkit::RedisNodes;

/// The most allocations a lock cycle on five nodes may take, on average.
/// Measured 84.5 to 84.7 on an idle machine and a few fewer under load, in
/// this test's debug build with every feature (Redis 7.0, the script
/// path): the count varies with how many nodes answer after the decision
/// (each followed in the background), more of them on a fast machine.
/// Was 116.7 before the metrics' labels were kept, the nodes' command
/// buffers reused and a round's votes read without collecting them.
/// Lower it as the count comes down (issue #55 aims at half the 66 it
/// counted in its benchmark's release build).
const MOST_PER_CYCLE: f64 = 88.0;

#[test]
fn a_lock_cycle_on_five_nodes_allocates_little() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = Redlock::new(nodes.urls()).expect("config");
    let ttl = Duration::from_secs(10);
    let names: Vec<String> = (0..16).map(|i| format!("alloc:{i}")).collect();
    let cycles = |n: usize| {
        runtime.block_on(async {
            for i in 0..n {
                locks
                    .lock(&names[i % names.len()], ttl)
                    .await
                    .expect("lock")
                    .release()
                    .await
                    .expect("release");
            }
            locks.settle().await;
        });
    };
    // Connections made, commands learnt, scripts cached.
    cycles(200);
    let counted = allocation_counter::measure(|| cycles(1_000));
    let per_cycle = counted.count_total as f64 / 1_000.0;
    println!("{per_cycle:.1} allocations per lock cycle on five nodes");
    assert!(
        per_cycle <= MOST_PER_CYCLE,
        "{per_cycle:.1} allocations per lock cycle on five nodes, more than {MOST_PER_CYCLE}"
    );
}
