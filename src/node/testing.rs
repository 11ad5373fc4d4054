//! Test helpers for nodes: nodes that are never connected to, and making
//! one unresponsive (for the node's tests, and the layers above them).

use crate::node::{Heard, Node, NodeOptions};

/// `n` nodes that are never connected to: the tests' fan-outs run fake
/// requests.
pub(crate) fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            Node::parse(
                &format!("redis://127.0.0.1:{}", 1000 + i),
                &NodeOptions::default(),
            )
            .expect("a node URL")
        })
        .collect()
}

/// Makes `node` unresponsive: its last requests timed out.
pub(crate) fn freeze(node: &Node) {
    while !node.unresponsive() {
        node.note(Heard::Timeout);
    }
}
