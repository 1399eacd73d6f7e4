use super::state::LEFTOVER_FLUSH_INTERVAL;
use super::*;
use crate::scheduler::framework::events::{
    ASSIGNED_POD_ADD, ActionType, ClusterEvent, EventResource, Hint, NODE_ADD, QueueingHints,
    Registration,
};
use crate::scheduler::framework::profile::Backoff;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::priority_sort;
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

/// Every profile has the same hints: those of the plugins given. PreEnqueue holds the pods
/// named in [`HELD`] back, by the plugin "Fit".
struct Hints(Arc<QueueingHints>);

static HELD: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());

impl HintSource for Hints {
    fn hints(&self, _scheduler_name: &str) -> Option<Arc<QueueingHints>> {
        Some(self.0.clone())
    }
    fn interested_in(&self, event: &ClusterEvent) -> bool {
        self.0.interested_in(event)
    }
    fn pre_enqueue(&self, _scheduler_name: &str, pod: &PodInfo) -> Option<&'static str> {
        let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        held.contains(&pod.name()).then_some("Fit")
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

/// A pod a PreEnqueue plugin with events holds back (DynamicResources while its claim is
/// missing) is asked again on an event that plugin registered and hints, and goes to activeQ
/// once nothing holds it; an event it did not register moves nothing.
#[test]
fn a_pod_held_by_a_plugin_with_events_is_asked_again_on_them() {
    let q = queue();
    HELD.lock().unwrap().push("held-by-fit");
    q.add(pod("held-by-fit", 0), Some("Fit"));
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 0, 0, 1), "still held: it stays gated");
    HELD.lock().unwrap().retain(|n| *n != "held-by-fit");
    q.on_event(ASSIGNED_POD_ADD, None, bound("other", "db"));
    assert_eq!(q.lengths(), (0, 0, 0, 1), "Fit registered no bound pod");
    q.on_event(NODE_ADD, None, node("n3"));
    assert_eq!(q.lengths(), (1, 0, 0, 0), "asked again, nothing holds it");
    assert_eq!(pop_names(&q, 1), ["held-by-fit"]);
    // PreEnqueue ran before the queue's lock was taken and held the pod; the event that frees
    // it passed before the pod was queued: the queue asks again as it adds it.
    q.add(pod("freed-meanwhile", 0), Some("Fit"));
    assert_eq!(
        q.lengths(),
        (1, 0, 0, 0),
        "not left gated on a stale answer"
    );
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
            ("gated", 1),
            ("incomplete", 0),
            ("pending", 0)
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

/// upstream's wildcard event that retries every parked pod (a leftover flush, a fake clock's
/// `MoveAllToActiveOrBackoffQueue(EventUnschedulableTimeout)`).
const TIMEOUT: ClusterEvent = crate::scheduler::framework::events::UNSCHEDULABLE_TIMEOUT;

/// An instant `d` before now.
fn long_ago(d: Duration) -> Instant {
    Instant::now()
        .checked_sub(d)
        .expect("the clock reaches back")
}

/// Ends every backoff now, as upstream's tests step their fake clock past it: the deadlines in
/// both backoffQ heaps and in the entries are moved before the current window.
fn expire_backoffs(q: &SchedulingQueue) {
    let past = long_ago(Duration::from_secs(2));
    let mut guard = q.lock();
    let st = &mut *guard;
    for heap in [&mut st.backoff, &mut st.error_backoff] {
        let mut entries = std::mem::take(&mut *heap).into_vec();
        for entry in &mut entries {
            entry.until = past;
        }
        heap.extend(entries);
    }
    for entry in st.entries.values_mut() {
        if entry.backoff_until.is_some() {
            entry.backoff_until = Some(past);
        }
    }
}

/// Sets a parked pod's backoff deadline (what an event moving it reads).
fn set_backoff_until(q: &SchedulingQueue, name: &str, until: Instant) {
    q.lock()
        .entries
        .get_mut(&key(name))
        .expect("queued")
        .backoff_until = Some(until);
}

/// Sets a waiting pod's timestamp (its place among pods of its priority once it is pushed).
fn set_timestamp(q: &SchedulingQueue, name: &str, at: Instant) {
    q.lock()
        .entries
        .get_mut(&key(name))
        .expect("queued")
        .info
        .timestamp = at;
}

/// Runs the backoff flush a waiting `pop` runs.
fn flush(q: &SchedulingQueue) {
    let mut st = q.lock();
    q.flush(&mut st);
}

/// upstream's TestBackoffQueueOrdering, "Pods with the same window are ordered by priority if
/// PopFromBackoffQ is enabled" (popBackoff uses the same order): with activeQ empty, backoffQ is
/// popped by the window its backoff ends in first, then by QueueSort (priority, then the older
/// timestamp) within a window; a high priority does not beat an earlier window.
#[test]
fn backoff_q_pops_the_earliest_window_first_then_by_priority_within_a_window() {
    let q = queue();
    for (name, priority) in [("a", 1), ("b", 2), ("c", 1), ("d", 5), ("e", 1)] {
        q.add(pod(name, priority), None);
    }
    for _ in 0..5 {
        let p = q.pop().expect("a pod");
        q.add_unschedulable(&["Fit"], p.pod.uid(), LONG_BACKOFF, None);
    }
    assert_eq!(q.lengths(), (0, 0, 5, 0));
    let w = q.align(Instant::now() + Duration::from_secs(60));
    let window = Duration::from_secs(1);
    for (name, until) in [
        ("a", w),
        ("b", w),
        ("e", w),
        ("c", w - window),
        ("d", w + window),
    ] {
        set_backoff_until(&q, name, until);
    }
    let base = long_ago(Duration::from_secs(1));
    set_timestamp(&q, "a", base);
    set_timestamp(&q, "e", base + Duration::from_millis(1));
    set_timestamp(&q, "b", base + Duration::from_millis(2));
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 5, 0, 0), "all back off");
    assert_eq!(pop_names(&q, 5), ["c", "b", "a", "e", "d"]);
}

/// upstream's TestPriorityQueue_Update, "when updating a pod in unschedulableEntities, if its
/// backoff timer has not yet expired, it moves to backoffQ" and "... if its backoff timer has
/// expired, it moves to activeQ": an update a rejecting plugin's hint says may help moves a
/// parked pod, with its newest object, to backoffQ while it backs off, else to activeQ.
#[test]
fn an_update_that_may_help_a_parked_pod_moves_it_to_backoff_or_active_by_its_backoff() {
    let web = || Arc::new(PodBuilder::new("p").label("app", "web").info());

    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.add_unschedulable(&["Affinity"], &key("p"), LONG_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 0, 1, 0));
    q.update(web(), None);
    assert_eq!(q.lengths(), (0, 1, 0, 0), "still backing off: backoffQ");
    let popped = q.pop().expect("popped from backoffQ, activeQ being empty");
    assert_eq!(
        popped.pod.labels().get("app").map(String::as_str),
        Some("web")
    );

    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.add_unschedulable(&["Affinity"], &key("p"), LONG_BACKOFF, None);
    set_backoff_until(&q, "p", long_ago(Duration::from_secs(2)));
    q.update(web(), None);
    assert_eq!(q.lengths(), (1, 0, 0, 0), "backoff over: activeQ");
    let popped = q.pop().expect("p");
    assert_eq!(
        popped.pod.labels().get("app").map(String::as_str),
        Some("web")
    );
}

/// upstream's TestPriorityQueue_Update, "when updating a pod in unschedulableEntities, if the
/// scheduling hint returns QueueSkip, it remains in unschedulableEntities": the pod stays
/// parked, but with the newest object, which a later event moves.
#[test]
fn an_update_that_cannot_help_a_parked_pod_leaves_it_parked_with_its_newest_object() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.add_unschedulable(&["Affinity"], &key("p"), NO_BACKOFF, None);
    q.update(
        Arc::new(PodBuilder::new("p").label("app", "db").info()),
        None,
    );
    assert_eq!(q.lengths(), (0, 0, 1, 0), "the hint skips it");
    q.on_event(ASSIGNED_POD_ADD, None, bound("web-0", "web"));
    let popped = q.pop().expect("moved by the pod it waited for");
    assert_eq!(
        popped.pod.labels().get("app").map(String::as_str),
        Some("db"),
        "the update was kept"
    );
}

/// upstream's TestPriorityQueue_Update, "When updating a pod that is in backoff queue and is
/// still backing off, it will be updated in backoff queue": an update does not promote it to
/// activeQ, and the object popped after its backoff is the newest.
#[test]
fn an_update_of_a_pod_backing_off_keeps_it_in_backoff_q_with_its_newest_object() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.pop().expect("p");
    q.add_unschedulable(&["Fit"], &key("p"), LONG_BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 1, 0, 0));
    q.add(pod("other", 0), None);
    let annotated = PodBuilder::new("p").annotation("foo", "test").info();
    q.update(Arc::new(annotated), None);
    assert_eq!(q.lengths(), (1, 1, 0, 0), "still in backoffQ");
    assert_eq!(pop_names(&q, 1), ["other"], "activeQ goes first");
    let popped = q.pop().expect("p, from backoffQ");
    assert_eq!(popped.pod.name(), "p");
    let foo = popped
        .pod
        .pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("foo"))
        .map(String::as_str);
    assert_eq!(foo, Some("test"));
    assert_eq!(q.lengths(), (0, 0, 0, 0));
}

/// upstream's TestPriorityQueue_Update, "Update pod that didn't exist in the queue" (activeQ)
/// and "Update gated pod that didn't exist in the queue" (held by its gate).
#[test]
fn an_update_of_a_pod_the_queue_does_not_hold_adds_it() {
    let q = queue();
    q.update(pod("new", 0), None);
    q.update(pod("g", 0), Some("SchedulingGates"));
    assert_eq!(q.lengths(), (1, 0, 0, 1));
    assert_eq!(pop_names(&q, 1), ["new"]);
    assert_eq!(q.lengths(), (0, 0, 0, 1), "the gated pod waits");
}

/// upstream's TestPriorityQueue_Activate, "pod in backoffQ" (a pod with no rejecting plugin, so
/// in the error backoffQ) and the same for a rejected pod: the backoff is skipped, and the pod's
/// old backoffQ heap entry never sends it anywhere again once it is elsewhere.
#[test]
fn an_activated_pod_backing_off_skips_its_backoff_and_its_old_entry_is_ignored() {
    // Rejected, in backoffQ.
    let q = queue();
    q.add(pod("p", 0), None);
    let p = q.pop().expect("p");
    q.add_unschedulable(&["Fit"], &key("p"), LONG_BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 1, 0, 0));
    q.activate(&p.pod.pod);
    assert_eq!(q.lengths(), (1, 0, 0, 0), "its backoff skipped");
    assert_eq!(pop_names(&q, 1), ["p"]);
    q.add_unschedulable(&["Affinity"], &key("p"), LONG_BACKOFF, None);
    q.add(pod("other", 0), None);
    assert_eq!(pop_names(&q, 1), ["other"]);
    q.add_unschedulable(&["Fit"], &key("other"), LONG_BACKOFF, None);
    // Its backoff ends after p's old heap entry's, which is popped first and must be skipped.
    set_backoff_until(&q, "other", Instant::now() + Duration::from_secs(3600));
    q.on_event(NODE_ADD, None, node("n3"));
    assert_eq!(q.lengths(), (0, 1, 1, 0));
    assert_eq!(pop_names(&q, 1), ["other"], "p's old entry is not popped");
    assert_eq!(q.lengths(), (0, 0, 1, 0), "p still waits for its event");

    // Failed with an error, in the error backoffQ.
    let q = queue();
    q.add(pod("p", 0), None);
    let p = q.pop().expect("p");
    q.requeue_with_backoff(&key("p"), LONG_BACKOFF);
    assert_eq!(q.lengths(), (0, 1, 0, 0));
    q.activate(&p.pod.pod);
    assert_eq!(q.lengths(), (1, 0, 0, 0), "its backoff skipped");
    assert_eq!(pop_names(&q, 1), ["p"]);
    q.add_unschedulable(&["Affinity"], &key("p"), LONG_BACKOFF, None);
    expire_backoffs(&q);
    flush(&q);
    assert_eq!(
        q.lengths(),
        (0, 0, 1, 0),
        "the flush skips p's old entry: p still waits for its event"
    );
}

/// upstream's TestPriorityQueue_Activate, "pod already in activeQ": nothing changes, and the pod
/// is popped once.
#[test]
fn activating_a_pod_in_active_q_changes_nothing() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.activate(&pod("p", 0).pod);
    assert_eq!(q.lengths(), (1, 0, 0, 0));
    assert_eq!(pop_names(&q, 1), ["p"]);
    assert_eq!(q.lengths(), (0, 0, 0, 0), "popped once");
}

/// upstream's Test_InFlightPods, "One intermediate Pod registered in inFlightPods is enqueued
/// back to activeQ": a pod landing in the middle keeps the events the earlier pod in flight
/// still needs; a pod replays only the events since its own pop.
#[test]
fn events_are_kept_for_earlier_pods_in_flight_and_replayed_only_from_each_pods_pop() {
    let q = queue();
    for name in ["p1", "p2", "p3"] {
        q.add(pod(name, 0), None);
    }
    assert_eq!(q.pop().expect("p1").pod.name(), "p1");
    q.on_event(NODE_ADD, None, node("n1"));
    assert_eq!(q.pop().expect("p2").pod.name(), "p2");
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.pop().expect("p3").pod.name(), "p3");
    q.on_event(ASSIGNED_POD_ADD, None, bound("db-0", "db"));
    assert_eq!(q.kept_events(), 3);

    q.requeue_with_backoff(&key("p2"), LONG_BACKOFF);
    assert_eq!(q.lengths(), (0, 1, 0, 0), "an error backs off");
    assert_eq!(q.kept_events(), 3, "p1 still needs every event");

    q.add_unschedulable(&["Fit"], &key("p3"), LONG_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 1, 1, 0),
        "p3 is parked: the nodes came before its pop"
    );
    q.add_unschedulable(&["Fit"], &key("p1"), LONG_BACKOFF, None);
    assert_eq!(
        q.lengths(),
        (0, 2, 1, 0),
        "p1 backs off: a node came during its attempt"
    );
    assert_eq!(q.kept_events(), 0, "no pod in flight keeps no events");
}

/// upstream's Test_isPodWorthRequeuing, "return Skip when the event is wildcard, but the wildcard
/// targets a different pod", and TestPriorityQueue_Activate, "pod not in
/// unschedulableEntities/backoffQ and not in-flight": activating one pod in flight requeues that
/// pod alone when it fails; another pod in flight is parked.
#[test]
fn activating_one_pod_in_flight_does_not_requeue_another() {
    let q = queue();
    q.add(pod("a", 0), None);
    q.add(pod("b", 0), None);
    let a = q.pop().expect("a");
    assert_eq!(a.pod.name(), "a");
    q.pop().expect("b");
    q.activate(&a.pod.pod);
    q.add_unschedulable(&["Fit"], &key("b"), LONG_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 0, 1, 0), "b is parked");
    q.add_unschedulable(&["Fit"], &key("a"), LONG_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 1, 1, 0), "a is requeued");
}

/// upstream's TestPriorityQueue_MoveAllToActiveOrBackoffQueueWithQueueingHint, "Queue queues pod
/// to activeQ if Pod is not backing off", and the last block of
/// TestPriorityQueue_MoveAllToActiveOrBackoffQueue: an event that helps a pod whose backoff has
/// ended sends it straight to activeQ, where its failure time puts it ahead of pods added later;
/// a pod the event cannot help stays, whatever its backoff.
#[test]
fn an_event_moves_a_pod_whose_backoff_ended_straight_to_active_q() {
    let q = queue();
    q.add(pod("p", 0), None);
    q.add(pod("stuck", 0), None);
    assert_eq!(pop_names(&q, 2), ["p", "stuck"]);
    q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
    q.add_unschedulable(&["Affinity"], &key("stuck"), BACKOFF, None);
    let past = long_ago(Duration::from_secs(2));
    set_backoff_until(&q, "p", past);
    set_backoff_until(&q, "stuck", past);
    set_timestamp(&q, "p", long_ago(Duration::from_secs(1)));
    q.add(pod("later", 0), None);
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (2, 0, 1, 0), "p in activeQ, not backoffQ");
    assert_eq!(pop_names(&q, 2), ["p", "later"]);
    assert_eq!(q.lengths(), (0, 0, 1, 0), "stuck waits for its event");
}

/// upstream's TestPodTimestamp, "add one pod to BackoffQ and move it to activeQ": a pod whose
/// backoff ends keeps its timestamp, so it goes before a pod added after its failure.
#[test]
fn a_pod_whose_backoff_ends_keeps_its_place_before_pods_added_after_its_failure() {
    let q = queue();
    q.add(pod("p1", 0), None);
    q.pop().expect("p1");
    q.requeue_with_backoff(&key("p1"), BACKOFF);
    set_timestamp(&q, "p1", long_ago(Duration::from_secs(1)));
    q.add(pod("p2", 0), None);
    expire_backoffs(&q);
    assert_eq!(pop_names(&q, 2), ["p1", "p2"]);
}

/// upstream's TestPodFailedSchedulingMultipleTimesDoesNotBlockNewerPod: a pod that fails again
/// goes behind a pod of its priority added during its attempt.
#[test]
fn a_pod_failing_again_does_not_block_a_newer_pod() {
    let q = queue();
    q.add(pod("unschedulable", 1000), None);
    q.pop().expect("unschedulable");
    q.add_unschedulable(&["Fit"], &key("unschedulable"), NO_BACKOFF, None);
    q.on_event(TIMEOUT, None, None);
    assert_eq!(pop_names(&q, 1), ["unschedulable"]);
    q.add(pod("newer", 1000), None);
    q.add_unschedulable(&["Fit"], &key("unschedulable"), NO_BACKOFF, None);
    q.on_event(TIMEOUT, None, None);
    assert_eq!(q.lengths(), (2, 0, 0, 0));
    assert_eq!(pop_names(&q, 1), ["newer"]);
}

/// upstream's TestRecentlyTriedPodsGoBack: a pod retried after a failure is popped after the
/// pods of its priority that waited all along.
#[test]
fn a_recently_tried_pod_goes_behind_the_pods_that_waited() {
    let q = queue();
    for i in 0..5 {
        q.add(pod(&format!("p{i}"), 1000), None);
    }
    let tried = q.pop().expect("a pod");
    assert_eq!(tried.pod.name(), "p0");
    q.add_unschedulable(&["Fit"], &key("p0"), NO_BACKOFF, None);
    q.on_event(TIMEOUT, None, None);
    assert_eq!(pop_names(&q, 5), ["p1", "p2", "p3", "p4", "p0"]);
}

/// upstream's TestPriorityQueue_AddUnschedulablePodIfNotPresent_Backoff, with Test_InFlightPods'
/// "events before popping Pod are ignored when Pod is enqueued back to queue": a wildcard event
/// while nine pods are in flight sends each of them to backoffQ when it fails, whatever its
/// hints; a pod popped after the event does not see it.
#[test]
fn a_wildcard_event_during_many_attempts_sends_every_rejected_pod_to_backoff() {
    let q = queue();
    for i in 0..10 {
        q.add(pod(&format!("p{i}"), i), None);
    }
    let want: Vec<String> = (1..10).rev().map(|i| format!("p{i}")).collect();
    assert_eq!(pop_names(&q, 9), want);
    q.on_event(TIMEOUT, None, None);
    assert_eq!(pop_names(&q, 1), ["p0"]);
    for i in 1..10 {
        q.add_unschedulable(&["Affinity"], &key(&format!("p{i}")), LONG_BACKOFF, None);
    }
    assert_eq!(q.lengths(), (0, 9, 0, 0), "all nine back off");
    assert_eq!(q.kept_events(), 0, "p0 was popped after the event");
    q.add_unschedulable(&["Affinity"], &key("p0"), LONG_BACKOFF, None);
    assert_eq!(q.lengths(), (0, 9, 1, 0), "p0 is parked");
}

/// upstream's TestPriorityQueue_Delete, "Delete pod from activeQ", "Delete pod from backoffQ",
/// "Delete pod from unschedulablePods" and "Delete non-existing pod": a deleted pod is never
/// popped nor moved again, and the other pods stay poppable.
#[test]
fn a_deleted_pod_is_never_popped_and_the_others_stay() {
    // From activeQ.
    let q = queue();
    q.add(pod("a", 10), None);
    q.add(pod("b", 0), None);
    assert!(q.delete(&key("a")));
    assert_eq!(pop_names(&q, 1), ["b"]);
    assert_eq!(q.lengths(), (0, 0, 0, 0));
    assert!(!q.contains(&key("a")));

    // From backoffQ: its heap entry, ending first, is skipped.
    let q = queue();
    q.add(pod("a", 0), None);
    q.add(pod("c", 0), None);
    assert_eq!(pop_names(&q, 2), ["a", "c"]);
    q.add_unschedulable(&["Fit"], &key("a"), LONG_BACKOFF, None);
    q.add_unschedulable(&["Fit"], &key("c"), LONG_BACKOFF, None);
    set_backoff_until(&q, "c", Instant::now() + Duration::from_secs(3600));
    q.on_event(NODE_ADD, None, node("n2"));
    assert_eq!(q.lengths(), (0, 2, 0, 0));
    assert!(q.delete(&key("a")));
    q.add(pod("b", 0), None);
    assert_eq!(pop_names(&q, 2), ["b", "c"]);
    assert_eq!(q.lengths(), (0, 0, 0, 0));

    // From the error backoffQ: its backoff ending moves nothing.
    let q = queue();
    q.add(pod("e", 0), None);
    q.pop().expect("e");
    q.requeue_with_backoff(&key("e"), LONG_BACKOFF);
    assert!(q.delete(&key("e")));
    expire_backoffs(&q);
    flush(&q);
    assert_eq!(q.lengths(), (0, 0, 0, 0));
    assert!(!q.contains(&key("e")));

    // From the unschedulable pool: an event that would have moved it moves nothing.
    let q = queue();
    q.add(pod("u", 0), None);
    q.pop().expect("u");
    q.add_unschedulable(&["Affinity"], &key("u"), NO_BACKOFF, None);
    assert!(!q.delete(&key("u")));
    q.on_event(ASSIGNED_POD_ADD, None, bound("web-0", "web"));
    assert_eq!(q.lengths(), (0, 0, 0, 0));
    assert!(!q.contains(&key("u")));

    // A pod the queue does not hold.
    let q = queue();
    q.add(pod("x", 0), None);
    assert!(!q.delete(&key("never")));
    assert_eq!(q.lengths(), (1, 0, 0, 0));
    assert_eq!(pop_names(&q, 1), ["x"]);
}

/// upstream's TestBackOffFlow (PopFromBackoffQ enabled, 1 s initial and 10 s maximum backoff):
/// each attempt is counted, the backoff doubles with each rejection up to the maximum
/// (1, 2, 4, 8, 10, 10, 10 s, ending on a window), an early flush leaves the pod in backoffQ,
/// and a flush after its backoff moves it to activeQ.
#[test]
fn repeated_rejections_back_off_one_two_four_eight_then_ten_seconds() {
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(10),
    };
    let q = queue();
    q.add(pod("p", 0), None);
    for (attempt, secs) in (1u32..).zip([1u64, 2, 4, 8, 10, 10, 10]) {
        let p = q.pop().expect("p");
        assert_eq!(p.attempts, attempt);
        let want = Duration::from_secs(secs);
        let t = Instant::now();
        q.add_unschedulable(&["Fit"], &key("p"), backoff, None);
        let t2 = Instant::now();
        let until = q
            .lock()
            .entries
            .get(&key("p"))
            .expect("queued")
            .backoff_until;
        assert!(
            until == Some(q.align(t + want)) || until == Some(q.align(t2 + want)),
            "attempt {attempt}: the backoff is {secs}s, ending on a window"
        );
        q.on_event(TIMEOUT, None, None);
        assert_eq!(q.lengths(), (0, 1, 0, 0), "attempt {attempt}: in backoffQ");
        flush(&q);
        assert_eq!(
            q.lengths(),
            (0, 1, 0, 0),
            "attempt {attempt}: still backing off after an early flush"
        );
        expire_backoffs(&q);
        flush(&q);
        assert_eq!(
            q.lengths(),
            (1, 0, 0, 0),
            "attempt {attempt}: out of backoffQ once its backoff ended"
        );
    }
}

/// A gang member of `group`, named `name`.
fn member(name: &str, group: &str) -> Arc<PodInfo> {
    let mut pod = PodBuilder::new(name).build();
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(group.into()),
        });
    }
    Arc::new(PodInfo::new(Arc::new(pod)))
}

/// The pop of one gang member takes its waiting siblings with it, wherever they wait (activeQ,
/// backoffQ, the unschedulable pool, held by the group's own plugin), but not those another
/// PreEnqueue plugin holds, another group's pods or plain pods; the taken pods are in flight, so a failed attempt sends them back as any
/// popped pod.
#[test]
fn popping_a_gang_member_takes_its_waiting_siblings() {
    let q = queue();
    // c waits in backoffQ, d in the unschedulable pool.
    q.add(member("c", "g"), None);
    q.add(member("d", "g"), None);
    assert_eq!(pop_names(&q, 2), ["c", "d"]);
    q.add_unschedulable(&["Fit"], &key("c"), BACKOFF, None);
    q.add_unschedulable(&["Fit"], &key("d"), BACKOFF, None);
    q.on_event(ASSIGNED_POD_ADD, None, bound("z", "db"));
    q.add(member("a", "g"), None);
    q.add(member("b", "g"), None);
    q.add(member("x", "other"), None);
    q.add(pod("plain", 0), None);
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push("gang-held");
    q.add(member("gang-held", "g"), Some("Fit"));
    q.add(member("gated", "g"), Some("GangScheduling"));

    let first = q.pop().expect("a");
    assert_eq!(first.pod.name(), "a");
    let key_g = crate::scheduler::informers::pod_groups::GroupKey {
        api: crate::scheduler::informers::pod_groups::GroupApi::Workload,
        namespace: "default".to_string(),
        name: "g".to_string(),
    };
    let in_g = |pod: &crate::k8s::pod::Pod| {
        crate::scheduler::informers::pod_groups::group_of(pod).as_ref() == Some(&key_g)
    };
    let mut taken: Vec<String> = q
        .take_group(in_g, first.pod.uid(), "GangScheduling")
        .into_iter()
        .map(|p| p.pod.name().to_string())
        .collect();
    taken.sort();
    assert_eq!(
        taken,
        ["b", "c", "d", "gated"],
        "gang-held is held at PreEnqueue by another plugin; x and plain are not of g"
    );
    assert!(
        q.take_group(in_g, first.pod.uid(), "GangScheduling")
            .is_empty(),
        "taken pods are in flight"
    );
    assert_eq!(pop_names(&q, 2), ["x", "plain"]);
    q.add_unschedulable(&["Fit"], &key("c"), NO_BACKOFF, None);
    q.on_event(NODE_ADD, None, node("n9"));
    assert_eq!(
        pop_names(&q, 1),
        ["c"],
        "a taken pod comes back as a popped one"
    );
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|n| *n != "gang-held");
}

/// A group waits whole while one of its members is held by another PreEnqueue plugin (a
/// scheduling gate), as upstream gates a PodGroup's entity: the popped member and its waiting
/// siblings are held by the group's plugin, not tried (the popped one's attempt not counted);
/// once the gate is gone, the released member's cycle takes them all.
#[test]
fn a_group_waits_whole_while_a_member_is_gated() {
    let q = queue();
    q.add(member("held-a", "h"), None);
    q.add(member("held-b", "h"), None);
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push("held-gated");
    q.add(member("held-gated", "h"), Some("Fit"));
    let key_h = crate::scheduler::informers::pod_groups::GroupKey {
        api: crate::scheduler::informers::pod_groups::GroupApi::Workload,
        namespace: "default".to_string(),
        name: "h".to_string(),
    };
    let in_h = |pod: &crate::k8s::pod::Pod| {
        crate::scheduler::informers::pod_groups::group_of(pod).as_ref() == Some(&key_h)
    };
    let first = q.pop().expect("held-a");
    assert_eq!(first.pod.name(), "held-a");
    assert!(q.hold_group_while_gated(in_h, first.pod.uid(), "GangScheduling"));
    q.add(pod("plain", 0), None);
    assert_eq!(
        pop_names(&q, 1),
        ["plain"],
        "the group's pods are not popped while one is gated"
    );
    assert_eq!(q.lengths().3, 3, "all three held");

    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|n| *n != "held-gated");
    q.update(member("held-gated", "h"), None);
    let released = q.pop().expect("the released member");
    assert_eq!(released.pod.name(), "held-gated");
    assert!(!q.hold_group_while_gated(in_h, released.pod.uid(), "GangScheduling"));
    let taken = q.take_group(in_h, released.pod.uid(), "GangScheduling");
    let mut names: Vec<(String, u32)> = taken
        .iter()
        .map(|p| (p.pod.name().to_string(), p.attempts))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("held-a".to_string(), 1), ("held-b".to_string(), 1)],
        "taken with the released one; held-a's held pop was no attempt"
    );
}

/// `scheduler_queued_entities`: a pod of no PodGroup is one entity, a PodGroup one however many
/// of its members wait in the sub-queue; `pending` lists a namespace's pods with where they wait.
#[test]
fn the_summary_counts_a_groups_members_as_one_entity() {
    let q = queue();
    q.add(pod("alone", 0), None);
    q.add(pod("also-alone", 0), None);
    for name in ["m0", "m1", "m2"] {
        q.add(member(name, "train"), None);
    }
    q.add(member("other", "serve"), Some("SchedulingGates"));
    let entities = q.summary().entities;
    assert_eq!(entities[0], ("active", 2, 1), "{entities:?}");
    assert_eq!(entities[3], ("gated", 0, 1), "{entities:?}");
    let mut pending: Vec<(String, &str)> = q
        .pending(Some("default"))
        .into_iter()
        .map(|p| (p.pod.name().to_string(), p.queue))
        .collect();
    pending.sort();
    assert_eq!(pending.len(), 6);
    assert_eq!(pending[5], ("other".to_string(), "gated"));
    assert!(q.pending(Some("elsewhere")).is_empty());
}

/// kube-scheduler 1.38's group pools in `scheduler_pending_pods`: the members of a PodGroup not
/// known yet are `incomplete` (not `gated`, and in no entity); the members that wait in activeQ
/// while a member of their group is in flight are `pending`; a pod of no group is where it waits.
#[test]
fn the_summary_counts_incomplete_and_pending_group_members_apart() {
    let q = queue();
    q.add(pod("alone", 0), None);
    for name in ["lost-0", "lost-1"] {
        q.add(member(name, "missing"), Some("GangScheduling"));
    }
    q.add(member("t0", "train"), None);
    // The plain pod and t0 are in activeQ; pop both, then put the plain pod back.
    let popped = pop_names(&q, 2);
    assert!(popped.contains(&"t0".to_string()), "{popped:?}");
    q.add(pod("alone-2", 0), None);
    for name in ["t1", "t2"] {
        q.add(member(name, "train"), None);
    }
    let summary = q.summary_with(|_, group| group != "missing");
    let counts: Vec<_> = summary.pools.iter().map(|(q, n, _)| (*q, *n)).collect();
    assert_eq!(
        counts,
        [
            ("active", 1),
            ("backoff", 0),
            ("unschedulable", 0),
            ("gated", 0),
            ("incomplete", 2),
            ("pending", 2),
        ]
    );
    assert!(summary.pools[4].2.is_some() && summary.pools[5].2.is_some());
    assert_eq!(summary.entities[0], ("active", 1, 0));
    assert_eq!(summary.entities[3], ("gated", 0, 0));
    // With every root known and nothing in flight, they are counted where they wait.
    let all_known = queue();
    for name in ["lost-0", "lost-1"] {
        all_known.add(member(name, "missing"), Some("GangScheduling"));
    }
    let summary = all_known.summary();
    assert_eq!(summary.pools[3].1, 2);
    assert_eq!(summary.pools[4].1, 0);
    assert_eq!(summary.entities[3], ("gated", 0, 1));
}
