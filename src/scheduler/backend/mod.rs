//! What feeds the scheduling cycle, as kube-scheduler's `backend`: the cache of nodes and pods
//! (with assumed pods), the scheduling queue, and the nominator. The backend knows the
//! framework's contracts and nothing above them: no plugin, no profile compiler, no `Scheduler`.

pub mod cache;
pub mod holds;
pub mod node_tree;
pub mod nominator;
pub mod queue;
pub mod room;
