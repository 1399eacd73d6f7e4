use super::*;
use crate::scheduler::framework::events::{
    ASSIGNED_POD_ADD, ActionType, ClusterEvent, EventResource, Hint, NODE_ADD, QueueingHints,
    Registration,
};
use crate::scheduler::framework::profile::Backoff;
use crate::scheduler::plugins::priority_sort;
use crate::scheduler::plugins::registry::Handle;
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

/// A plugin that rejects pods and registers `events`.
struct Rejector {
    name: &'static str,
    events: Vec<Registration>,
}

impl Plugin for Rejector {
    fn name(&self) -> &'static str {
        self.name
    }
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(self.events.clone())
    }
}

/// Every profile has the same hints: those of the plugins given.
struct Hints(Arc<QueueingHints>);

impl HintSource for Hints {
    fn hints(&self, _scheduler_name: &str) -> Option<Arc<QueueingHints>> {
        Some(self.0.clone())
    }
    fn interested_in(&self, event: &ClusterEvent) -> bool {
        self.0.interested_in(event)
    }
}

/// "Fit" waits for nodes (any added node helps); "Affinity" waits for bound pods labelled
/// `app=web` (its hint looks at the pod).
fn queue() -> SchedulingQueue {
    let fit: Arc<dyn Plugin> = Arc::new(Rejector {
        name: "Fit",
        events: vec![Registration::always(NODE_ADD)],
    });
    let affinity: Arc<dyn Plugin> = Arc::new(Rejector {
        name: "Affinity",
        events: vec![Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::ADD | ActionType::UPDATE_POD_LABEL,
            ),
            Arc::new(|_pod, _old, new| {
                let web = new
                    .and_then(EventObject::pod)
                    .and_then(|p| p.metadata.labels.as_ref())
                    .and_then(|l| l.get("app"))
                    .is_some_and(|v| v == "web");
                if web { Hint::Queue } else { Hint::Skip }
            }),
        )],
    });
    SchedulingQueue::new(
        priority_sort::build(None, &"pluginConfig".into(), &Handle::default())
            .expect("PrioritySort builds"),
        Arc::new(Hints(Arc::new(QueueingHints::build([&fit, &affinity])))),
    )
}

fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    Arc::new(PodBuilder::new(name).priority(priority).info())
}

/// The UID PodBuilder gives a pod: the queue knows pods by UID.
fn key(name: &str) -> String {
    format!("uid-{name}")
}

fn bound(name: &str, app: &str) -> Option<EventObject> {
    Some(EventObject::Pod(Arc::new(
        PodBuilder::new(name)
            .label("app", app)
            .node_name("n1")
            .build(),
    )))
}

fn node(name: &str) -> Option<EventObject> {
    NodeBuilder::new(name)
        .info(vec![])
        .node
        .map(EventObject::Node)
}

const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(50),
    max: Duration::from_millis(200),
};
const NO_BACKOFF: Backoff = Backoff {
    initial: Duration::ZERO,
    max: Duration::ZERO,
};
const LONG_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(60),
    max: Duration::from_secs(60),
};

/// Pops `n` pods, returning their names.
fn pop_names(q: &SchedulingQueue, n: usize) -> Vec<String> {
    (0..n)
        .filter_map(|_| q.pop())
        .map(|p| p.pod.name().to_string())
        .collect()
}

#[test]
fn pops_by_priority_then_arrival() {
    let q = queue();
    q.add(pod("low", 1), None);
    q.add(pod("high", 10), None);
    q.add(pod("low-later", 1), None);
    assert_eq!(pop_names(&q, 3), ["high", "low", "low-later"]);
}

#[test]
fn a_pod_updated_while_it_waits_in_active_q_is_popped_with_its_newest_object() {
    let q = queue();
    q.add(pod("relabelled", 5), None);
    let relabelled = PodBuilder::new("relabelled")
        .priority(5)
        .label("touched", "yes")
        .info();
    q.update(Arc::new(relabelled), None);
    q.add(pod("later", 1), None);
    let first = q.pop().expect("a pod");
    assert_eq!(first.pod.name(), "relabelled", "not lost by the update");
    assert_eq!(
        first.pod.labels().get("touched").map(String::as_str),
        Some("yes")
    );
    assert_eq!(pop_names(&q, 1), ["later"]);
    assert_eq!(q.lengths(), (0, 0, 0, 0), "nothing left behind");
}

#[test]
fn an_update_that_raises_priority_re_sorts_active_q() {
    let q = queue();
    q.add(pod("x", 1), None);
    q.add(pod("y", 5), None);
    q.add(pod("z", 0), None);
    q.update(pod("x", 10), None);
    assert_eq!(pop_names(&q, 2), ["x", "y"]);
}

#[test]
fn a_failure_no_plugin_rejected_backs_off_as_an_error_and_never_waits_for_an_event() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.add_unschedulable(&[], &key("p"), BACKOFF, None);
    assert_eq!(q.lengths(), (0, 1, 0, 0), "in backoffQ, not the pool");
    let again = q.pop().expect("retried after its backoff");
    assert_eq!(
        (again.consecutive_errors_count, again.unschedulable_count),
        (1, 0)
    );
}

#[test]
fn errors_in_a_row_and_unschedulable_attempts_are_counted_apart() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.requeue_with_backoff(&key("p"), BACKOFF);
    q.pop().expect("after the first error");
    q.requeue_with_backoff(&key("p"), BACKOFF);
    let popped = q.pop().expect("after the second error");
    assert_eq!(
        (popped.consecutive_errors_count, popped.unschedulable_count),
        (2, 0)
    );
    q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n2"));
    let popped = q.pop().expect("after a rejection and a node");
    assert_eq!(
        (popped.consecutive_errors_count, popped.unschedulable_count),
        (0, 1),
        "a rejection ends the run of errors"
    );
    assert_eq!(
        backoff_duration(0, BACKOFF.initial, BACKOFF.max),
        Duration::ZERO
    );
}

#[test]
fn an_event_moves_pods_without_sending_them_behind_pods_that_failed_later() {
    let q = queue();
    q.add(pod("a", 0), None);
    q.add(pod("b", 0), None);
    q.pop().expect("a");
    q.pop().expect("b");
    q.add_unschedulable(&["Fit"], &key("b"), NO_BACKOFF, None);
    std::thread::sleep(Duration::from_millis(2));
    q.add_unschedulable(&["Fit"], &key("a"), NO_BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(
        pop_names(&q, 2),
        ["b", "a"],
        "b failed first, so it goes first"
    );
}

#[test]
fn gated_pods_wait_until_an_update_clears_the_gate() {
    let q = queue();
    q.add(pod("gated", 0), Some("SchedulingGates"));
    assert_eq!(q.lengths(), (0, 0, 0, 1));
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 0, 0, 1), "events do not move gated pods");
    q.update(pod("gated", 0), None);
    assert_eq!(pop_names(&q, 1), ["gated"]);
}

/// An ungated pod keeps its place among pods of its priority (created first, it goes first,
/// as upstream: Kueue and JobSet create pods gated), and its first attempt is timed from when
/// it was ungated, not created.
#[test]
fn an_ungated_pod_keeps_its_place_and_its_wait_starts_when_ungated() {
    let q = queue();
    q.add(pod("gated-first", 0), Some("SchedulingGates"));
    std::thread::sleep(std::time::Duration::from_millis(2));
    q.add(pod("created-later", 0), None);
    std::thread::sleep(std::time::Duration::from_millis(2));
    let ungated_at = std::time::Instant::now();
    q.update(pod("gated-first", 0), None);
    let first = q.pop().expect("a pod");
    assert_eq!(first.pod.name(), "gated-first", "it keeps its place");
    assert!(
        first.initial_attempt_timestamp >= ungated_at,
        "its first attempt is timed from its ungating"
    );
    assert!(first.timestamp < ungated_at, "its place is its creation");
}

#[test]
fn only_events_a_rejecting_plugin_registered_and_hints_for_move_a_pod() {
    let q = queue();
    q.add(pod("needs-node", 0), None);
    q.add(pod("needs-web", 0), None);
    q.pop().expect("needs-node");
    q.pop().expect("needs-web");
    q.add_unschedulable(&["Fit"], &key("needs-node"), NO_BACKOFF, None);
    q.add_unschedulable(&["Affinity"], &key("needs-web"), NO_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 0, 2, 0));

    q.on_event(ASSIGNED_POD_ADD, None, bound("db-0", "db"));
    assert_eq!(
        q.lengths(),
        (0, 0, 2, 0),
        "the hint skips a pod that does not help"
    );
    let node_label = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
    q.on_event(node_label, node("n1"), node("n1"));
    assert_eq!(q.lengths(), (0, 0, 2, 0), "nobody registered node labels");

    q.on_event(ASSIGNED_POD_ADD, None, bound("web-0", "web"));
    assert_eq!(
        pop_names(&q, 1),
        ["needs-web"],
        "moved by the pod it waited for"
    );
    assert_eq!(q.lengths(), (0, 0, 1, 0), "the other pod still waits");
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(pop_names(&q, 1), ["needs-node"]);
}

#[test]
fn an_event_during_the_attempt_that_helps_sends_the_pod_to_backoff_not_the_pool() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("a pod");
    q.on_event(NODE_ADD, None, node("n2"));
    q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 1, 0, 0),
        "the node arrived during its cycle"
    );
    assert!(q.pop().is_some(), "comes back after its backoff");

    q.on_event(ASSIGNED_POD_ADD, None, bound("db-0", "db"));
    q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 0, 1, 0),
        "an event that cannot help changes nothing"
    );
    assert_eq!(q.kept_events(), 0, "no pod in flight keeps no events");
}

#[test]
fn a_pending_pods_own_update_during_its_attempt_is_replayed_through_its_hints() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    // Its own label change while in flight: Affinity's hint sees the pod labelled web.
    let mut web = PodBuilder::new("p").label("app", "web").build();
    web.metadata.resource_version = Some("2".into());
    q.update(Arc::new(PodInfo::new(Arc::new(web))), None);
    q.add_unschedulable(&["Affinity"], &key("p"), NO_BACKOFF, None);
    let again = q.pop().expect("requeued by its own update");
    assert_eq!(
        again.pod.labels().get("app").map(String::as_str),
        Some("web")
    );
}

#[test]
fn backoff_q_is_popped_when_active_q_is_empty_but_errors_wait_their_backoff() {
    let q = queue();
    q.add(pod("rejected", 0), None);
    q.add(pod("failed", 5), None);
    q.pop().expect("failed");
    q.pop().expect("rejected");
    q.requeue_with_backoff(&key("failed"), LONG_BACKOFF);
    q.add_unschedulable(&["Fit"], &key("rejected"), LONG_BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 2, 0, 0), "both back off for a minute");
    let popped = q.pop().expect("popped from backoffQ at once");
    assert_eq!(popped.pod.name(), "rejected");
    assert_eq!(q.lengths(), (0, 1, 0, 0), "the error keeps its backoff");
}

#[test]
fn a_rejection_with_a_deadline_is_retried_then_without_an_event() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("a pod");
    q.add_unschedulable(
        &["StickyNode"],
        &key("p"),
        BACKOFF,
        Some(Duration::from_millis(50)),
    );
    assert_eq!(q.lengths(), (0, 1, 0, 0), "in backoff, not parked");
    assert!(q.pop().is_some(), "comes back when the deadline passes");
}

#[test]
fn deleted_and_assumed_pods_are_not_requeued() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("a pod");
    q.delete(&key("p"));
    q.add_unschedulable(&[], &key("p"), BACKOFF, None);
    assert!(!q.contains(&key("p")), "deleted while in flight: gone");

    q.add(pod("c", 0), None);
    q.pop().expect("c");
    q.delete(&key("c"));
    q.done(&key("c"));
    assert!(
        !q.contains(&key("c")),
        "deleted during a cycle that placed it: gone"
    );

    q.add(pod("b", 0), None);
    q.pop().expect("a pod");
    q.done(&key("b"));
    q.delete(&key("b")); // the watch saw it bound
    q.requeue_with_backoff(&key("b"), BACKOFF);
    assert!(!q.contains(&key("b")), "a bound pod is never requeued");
    assert_eq!(q.kept_events(), 0);
}

#[test]
fn events_are_kept_only_while_a_pod_is_in_flight() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.on_event(NODE_ADD, None, node("n1"));
    assert_eq!(q.kept_events(), 0);
    q.pop().expect("p");
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.kept_events(), 1);
    q.done(&key("p"));
    q.on_event(NODE_ADD, None, node("n3"));
    assert_eq!(q.kept_events(), 2, "kept through Permit");
    q.permitted(&key("p"));
    assert_eq!(q.kept_events(), 0, "dropped once no pod needs them");
}

#[test]
fn a_pod_recreated_under_its_name_is_another_pod() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("the first p");
    let again = Arc::new(PodBuilder::new("p").uid("second").info());
    q.add(again, None);
    q.delete(&key("p")); // the first one's deletion, while it is in flight
    q.add_unschedulable(&["Fit"], &key("p"), NO_BACKOFF, None);
    assert!(!q.contains(&key("p")), "the first one is gone");
    let popped = q.pop().expect("the second p is still queued");
    assert_eq!(popped.pod.uid(), "second");
}

#[test]
fn huge_backoffs_and_retry_times_never_panic() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    let huge = Backoff {
        initial: Duration::MAX,
        max: Duration::MAX,
    };
    q.add_unschedulable(&["Fit"], &key("p"), huge, Some(Duration::MAX));
    assert_eq!(
        q.lengths(),
        (0, 1, 0, 0),
        "backing off, as long as the clock allows"
    );
    assert_eq!(
        backoff_duration(40, Duration::MAX, Duration::MAX),
        Duration::MAX
    );
}

#[test]
fn backoff_doubles_up_to_the_max() {
    let (i, m) = (Duration::from_secs(1), Duration::from_secs(10));
    let got: Vec<u64> = (1..=6)
        .map(|a| backoff_duration(a, i, m).as_secs())
        .collect();
    assert_eq!(got, [1, 2, 4, 8, 10, 10]);
}

#[test]
fn backoff_ends_with_the_window_it_falls_in() {
    let q = queue();
    let now = q.epoch + Duration::from_millis(10_300);
    let until = Some(q.align(now + Duration::from_secs(1)));
    assert_eq!(until, Some(q.epoch + Duration::from_secs(11)));
    assert!(q.backing_off(until, q.epoch + Duration::from_millis(11_900)));
    assert!(!q.backing_off(until, q.epoch + Duration::from_secs(12)));
}

/// kube-scheduler's `scheduler_queue_incoming_pods_total`: each entry into a sub-queue is
/// counted once, with the event that caused it.
#[test]
fn every_entry_into_a_sub_queue_is_counted_with_its_event() {
    let q = queue();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let sink = seen.clone();
    q.count_incoming_with(Box::new(move |queue, event| {
        sink.lock()
            .expect("lock")
            .push((queue.to_string(), event.to_string()));
    }));
    let take = || std::mem::take(&mut *seen.lock().expect("lock"));
    let pair = |queue: &str, event: &str| (queue.to_string(), event.to_string());

    q.add(pod("a", 0), None);
    q.add(pod("gated", 0), Some("SchedulingGates"));
    assert_eq!(
        take(),
        [
            pair("active", "UnschedulablePodAdd"),
            pair("unschedulable", "UnschedulablePodAdd")
        ]
    );
    q.update(pod("gated", 0), None);
    assert_eq!(take(), [pair("active", "UnschedulablePodUpdate")]);

    pop_names(&q, 2);
    q.add_unschedulable(&["Fit"], &key("a"), NO_BACKOFF, None);
    q.requeue_with_backoff(&key("gated"), LONG_BACKOFF);
    assert_eq!(
        take(),
        [
            pair("unschedulable", "ScheduleAttemptFailure"),
            pair("backoff", "ScheduleAttemptFailure")
        ]
    );
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(take(), [pair("active", "NodeAdd")]);
    assert_eq!(pop_names(&q, 1), ["a"]);
    assert!(take().is_empty(), "a pop is no entry");
}

/// A pod no profile serves waits in the unserved pool: never popped, not counted as pending
/// for a profile, handed back when its profile appears; a pod whose profile goes away while it
/// is in flight goes there when its attempt fails, and waiting pods go there at once.
#[test]
fn unserved_pods_wait_in_the_queue_for_their_profile() {
    let q = queue();
    let other = |name: &str| Arc::new(PodBuilder::new(name).scheduler_name("elsewhere").info());
    q.add_unserved(other("stray"));
    q.add(pod("served", 1), None);
    assert_eq!(pop_names(&q, 1), ["served"]);
    assert_eq!(
        q.lengths(),
        (0, 0, 0, 0),
        "nothing to pop: the unserved pod is not active"
    );
    assert!(!q.contains(&key("stray")));
    assert!(q.take_unserved("tether-scheduler").is_empty());
    let back: Vec<String> = q
        .take_unserved("elsewhere")
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(back, ["stray"]);
    assert!(q.take_unserved("elsewhere").is_empty(), "taken once");

    let q = queue();
    q.add(other("flying"), None);
    q.add(other("waiting"), None);
    let flying = q.pop().expect("popped");
    q.unserve("elsewhere");
    assert!(
        !q.contains(&key("waiting")),
        "a waiting pod is unserved at once"
    );
    assert!(q.contains(&key("flying")), "the attempt under way finishes");
    q.add_unschedulable(&["Fit"], flying.pod.uid(), NO_BACKOFF, None);
    let mut back: Vec<String> = q
        .take_unserved("elsewhere")
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    back.sort();
    assert_eq!(back, ["flying", "waiting"]);
}

/// A profile that goes away and comes back while a pod of it is in flight leaves the pod
/// served: a failed attempt backs off as any other, not into the unserved pool. A popped pod
/// whose profile is gone at once waits unserved.
#[test]
fn a_profile_back_during_an_attempt_serves_its_pod_again() {
    let q = queue();
    let other = |name: &str| Arc::new(PodBuilder::new(name).scheduler_name("elsewhere").info());
    q.add(other("flying"), None);
    let flying = q.pop().expect("popped");
    q.unserve("elsewhere");
    assert!(q.take_unserved("elsewhere").is_empty(), "nothing waited");
    q.add_unschedulable(&["Fit"], flying.pod.uid(), NO_BACKOFF, None);
    assert!(q.contains(&key("flying")), "served again");
    assert!(q.take_unserved("elsewhere").is_empty());

    let q = queue();
    q.add(other("orphan"), None);
    let orphan = q.pop().expect("popped");
    q.unserve_popped(orphan.pod.uid());
    assert!(!q.contains(&key("orphan")));
    let back: Vec<String> = q
        .take_unserved("elsewhere")
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(back, ["orphan"]);
}

/// A nominated pod giving up its room moves only the parked pods of its priority or lower
/// (upstream's getLEPriorityPreCheck): a pod of higher priority never waited for that room.
#[test]
fn room_given_up_moves_only_pods_of_its_priority_or_lower() {
    let q = queue();
    q.add(pod("low", 10), None);
    q.add(pod("high", 100), None);
    assert_eq!(pop_names(&q, 2), ["high", "low"]);
    q.add_unschedulable(&["Fit"], &key("low"), NO_BACKOFF, None);
    q.add_unschedulable(&["Fit"], &key("high"), NO_BACKOFF, None);
    q.on_event_up_to_priority(NODE_ADD, None, node("n2"), 50);
    assert_eq!(q.lengths(), (1, 0, 1, 0), "the high one still waits");
    assert_eq!(pop_names(&q, 1), ["low"]);
}

/// Activate (a preemption whose evictions failed) sends a parked pod to activeQ at once,
/// whatever its backoff; a pod in flight is requeued when its attempt fails instead of
/// waiting in the unschedulable pool for an event.
#[test]
fn an_activated_pod_is_tried_again_at_once() {
    let q = queue();
    q.add(pod("p", 0), None);
    let p = q.pop().expect("p");
    q.add_unschedulable(&["Fit"], &key("p"), LONG_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 0, 1, 0));
    q.activate(&p.pod.pod);
    assert_eq!(pop_names(&q, 1), ["p"], "its backoff skipped");

    q.activate(&p.pod.pod);
    q.add_unschedulable(&["Fit"], &key("p"), LONG_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 1, 0, 0),
        "activated during its attempt: requeued (after its backoff), not parked"
    );
    q.activate(&pod("unknown", 0).pod);
    assert_eq!(
        q.lengths(),
        (0, 1, 0, 0),
        "a pod the queue does not hold is left"
    );
}

/// upstream's TestPriorityQueue_Activate, "in-flight": a pod waiting at Permit is still in
/// flight there (Done comes after Permit), so an activation then requeues it when Permit
/// rejects it; once past Permit, an activation has nothing to act on.
#[test]
fn an_assumed_pod_activated_before_permit_is_requeued_when_permit_rejects_it() {
    let q = queue();
    q.add(pod("p", 0), None);
    let p = q.pop().expect("p");
    q.done(&key("p"));
    q.activate(&p.pod.pod);
    q.add_unschedulable(&["Fit"], &key("p"), LONG_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 1, 0, 0),
        "activated at Permit: requeued (after its backoff), not parked"
    );

    q.add(pod("q", 0), None);
    let other = q.pop().expect("q");
    q.done(&key("q"));
    q.permitted(&key("q"));
    q.add(pod("r", 0), None);
    q.pop().expect("r, in flight");
    q.activate(&other.pod.pod);
    assert_eq!(q.kept_events(), 0, "past Permit, nothing is kept for it");
}

/// Backdates the last leftover flush and the timestamps of `aged` past
/// [`MAX_IN_UNSCHEDULABLE`], so that the next pop flushes them.
fn age(q: &SchedulingQueue, aged: &[&str]) {
    let long_ago = |d: Duration| {
        Instant::now()
            .checked_sub(d)
            .expect("the clock reaches back")
    };
    let mut st = q.lock();
    st.last_leftover_flush = long_ago(LEFTOVER_FLUSH_INTERVAL);
    for name in aged {
        st.entries
            .get_mut(&key(name))
            .expect("queued")
            .info
            .timestamp = long_ago(MAX_IN_UNSCHEDULABLE + Duration::from_secs(1));
    }
}

/// upstream's TestHighPriorityFlushUnschedulableEntitiesLeftover: pods parked for more than
/// five minutes are tried again whatever their hints say, by priority; younger ones stay.
#[test]
fn pods_parked_five_minutes_are_tried_again_by_priority_whatever_their_hints() {
    let q = queue();
    for (name, priority) in [("mid", 100), ("young", 0), ("high", 1000)] {
        q.add(pod(name, priority), None);
    }
    for _ in 0..3 {
        let p = q.pop().expect("a pod");
        q.add_unschedulable(&["Affinity"], p.pod.uid(), NO_BACKOFF, None);
    }
    assert_eq!(q.lengths(), (0, 0, 3, 0));
    age(&q, &["mid", "high"]);
    assert_eq!(pop_names(&q, 2), ["high", "mid"]);
    assert_eq!(q.lengths(), (0, 0, 1, 0), "the young pod waits on");
}

/// upstream's flush moves pods as any event does, and keeps the event for the pods in flight:
/// one rejected after the flush is retried (after its backoff), not parked for five more
/// minutes.
#[test]
fn a_pod_in_flight_when_the_leftover_flush_moves_pods_is_requeued_not_parked() {
    let q = queue();
    q.add(pod("old", 0), None);
    let old = q.pop().expect("old");
    q.add_unschedulable(&["Affinity"], old.pod.uid(), NO_BACKOFF, None);
    q.add(pod("x", 0), None);
    q.pop().expect("x, in flight from now on");
    age(&q, &["old"]);
    {
        let mut st = q.lock();
        q.flush(&mut st);
    }
    assert_eq!(q.lengths(), (1, 0, 0, 0), "the flush moved the old pod");
    q.add_unschedulable(&["Affinity"], &key("x"), LONG_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (1, 1, 0, 0),
        "x was in flight when the flush moved pods: it backs off, not parks"
    );
}

/// upstream's TestHighPriorityBackoff: a pod in activeQ goes before one backing off, whatever
/// their priorities.
#[test]
fn active_q_goes_before_a_higher_priority_pod_backing_off() {
    let q = queue();
    q.add(pod("high", 1000), None);
    q.pop().expect("high");
    q.on_event(NODE_ADD, None, node("n2"));
    q.add_unschedulable(&["Fit"], &key("high"), LONG_BACKOFF, None);
    q.add(pod("low", 0), None);
    assert_eq!(q.lengths(), (1, 1, 0, 0));
    assert_eq!(pop_names(&q, 1), ["low"]);
}

/// Deleting a pod says whether it waited to be tried (activeQ or backoffQ), for the `skip
/// schedule deleting pod` event upstream writes when it pops such a pod; a parked pod, a gated
/// one or one the queue never held did not.
#[test]
fn a_deleted_pod_says_whether_it_waited_to_be_tried() {
    let q = queue();
    q.add(pod("waiting", 0), None);
    q.add(pod("gated", 0), Some("SchedulingGates"));
    q.add(pod("parked", 0), None);
    assert_eq!(pop_names(&q, 1), ["waiting"]);
    q.add_unschedulable(&["Fit"], &key("waiting"), LONG_BACKOFF, None);
    assert!(q.delete(&key("parked")), "in activeQ");
    assert!(
        !q.delete(&key("waiting")),
        "parked in the unschedulable pool"
    );
    assert!(!q.delete(&key("gated")));
    assert!(!q.delete(&key("never")));
}

/// A preemptor is not tried again while its preemption's writes run, whatever would move it:
/// an event during its attempt, a later event, an activation (upstream's DefaultPreemption
/// gates it at PreEnqueue then; a retry would only find its victims still there). When the
/// writes end it waits for its victims' deletions, or moves at once when they are gone already.
#[test]
fn a_preemptor_waits_for_its_preemptions_writes_before_it_is_tried_again() {
    let q = queue();
    q.add(pod("vip", 0), None);
    let vip = q.pop().expect("vip");
    q.preempting(&key("vip"));
    q.on_event(NODE_ADD, None, node("n2"));
    q.add_unschedulable(&["Fit"], &key("vip"), NO_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 0, 1, 0),
        "the event during its attempt would have moved it; its preemption runs"
    );
    q.on_event(NODE_ADD, None, node("n3"));
    q.activate(&vip.pod.pod);
    assert_eq!(
        q.lengths(),
        (0, 0, 1, 0),
        "nor does a later event or an activation"
    );
    q.preempted(&key("vip"), || false);
    assert_eq!(
        q.lengths(),
        (0, 0, 1, 0),
        "its victims' deletions are to come"
    );
    q.on_event(NODE_ADD, None, node("n4"));
    assert_eq!(
        pop_names(&q, 1),
        ["vip"],
        "held no more: an event that helps moves it"
    );

    q.preempting(&key("vip"));
    q.add_unschedulable(&["Fit"], &key("vip"), NO_BACKOFF, None);
    q.preempted(&key("vip"), || true);
    assert_eq!(
        pop_names(&q, 1),
        ["vip"],
        "its victims went while it was held: no deletion is left to move it"
    );
    q.preempted(&key("gone"), || {
        panic!("not asked for a pod the queue does not hold")
    });
}

/// The summary `/metrics` reads: each sub-queue's pods, and the pods waiting after a rejection
/// by plugin and schedulerName (a scheduling gate counts as its plugin's), counted until popped
/// again as kube-scheduler counts them; a pod in flight is in neither.
#[test]
fn the_summary_counts_each_sub_queue_and_the_rejections_by_plugin() {
    let q = queue();
    q.add(pod("gated", 0), Some("SchedulingGates"));
    for name in ["a", "b", "in-flight"] {
        q.add(pod(name, 0), None);
    }
    assert_eq!(pop_names(&q, 3), ["a", "b", "in-flight"]);
    q.add_unschedulable(&["Fit"], &key("a"), NO_BACKOFF, None);
    q.add_unschedulable(&["Fit", "Affinity"], &key("b"), NO_BACKOFF, None);

    let scheduler = pods::scheduler_name(&pod("x", 0).pod).to_string();
    let rejected = |summary: Summary| {
        let mut r = summary.rejected_by;
        r.sort();
        r
    };
    let summary = q.summary();
    let counts: Vec<_> = summary.pools.iter().map(|(q, n, _)| (*q, *n)).collect();
    assert_eq!(
        counts,
        [
            ("active", 0),
            ("backoff", 0),
            ("unschedulable", 2),
            ("gated", 1)
        ]
    );
    assert!(summary.pools[0].2.is_none(), "no pod, no oldest");
    assert!(summary.pools[2].2.is_some_and(|t| t <= Instant::now()));
    assert_eq!(
        rejected(summary),
        [
            ("Affinity", scheduler.clone(), 1),
            ("Fit", scheduler.clone(), 2),
            ("SchedulingGates", scheduler.clone(), 1),
        ]
    );

    // A node moves both to activeQ: they still count until they are tried again.
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.summary().pools[0].1, 2);
    assert_eq!(rejected(q.summary()).len(), 3);
    assert_eq!(pop_names(&q, 1), ["a"]);
    assert_eq!(
        rejected(q.summary()),
        [
            ("Affinity", scheduler.clone(), 1),
            ("Fit", scheduler.clone(), 1),
            ("SchedulingGates", scheduler, 1),
        ]
    );
}
