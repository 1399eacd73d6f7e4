//! What sends a pod back towards activeQ: cluster events that a plugin which rejected it
//! registered and whose hint says they may help (upstream's MoveAllToActiveOrBackoffQueue and
//! isPodWorthRequeuing), events kept while pods are in flight and replayed against a pod whose
//! attempt fails, and the failed attempt itself (AddUnschedulableIfNotPresent).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backoff::{backoff_duration, backoff_failures, later};
use super::state::{ATTEMPT_FAILURE, Entry, Pool, RecordedEvent, SchedulingQueue, State};
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::scheduler::framework::QueuedPodInfo;
use crate::scheduler::framework::events::{
    ASSIGNED_POD_DELETE, ClusterEvent, ClusterEvents, EventObject, FORCE_ACTIVATE, HintSource,
    QueueingHints,
};
use crate::scheduler::framework::profile::Backoff;
use crate::scheduler::framework::runtime::priority;

impl SchedulingQueue {
    /// A pod's flight that started at `from` ended: events no pod in flight needs are dropped.
    pub(super) fn land(st: &mut State, from: Option<u64>) {
        let Some(from) = from else { return };
        if let Some(n) = st.in_flight_starts.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                st.in_flight_starts.remove(&from);
            }
        }
        let oldest = st
            .in_flight_starts
            .keys()
            .next()
            .copied()
            .unwrap_or(st.next_event);
        while st.in_flight_events.front().is_some_and(|e| e.seq < oldest) {
            st.in_flight_events.pop_front();
        }
    }

    /// Keeps an event for the pods in flight, if there are any.
    pub(super) fn record(
        st: &mut State,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        only_for: Option<String>,
    ) {
        if st.in_flight_starts.is_empty() {
            return;
        }
        let seq = st.next_event;
        st.next_event += 1;
        st.in_flight_events.push_back(RecordedEvent {
            seq,
            event,
            old,
            new,
            only_for,
        });
    }

    /// Moves a pod to activeQ, or to backoffQ while its backoff lasts, because of `event`. Its
    /// timestamp stays: an event moving a pod does not send it behind pods that failed after
    /// it. A pod whose preemption's writes are under way stays in the unschedulable pool (the
    /// event is not kept, as upstream's gate keeps none: its victims' deletions move it).
    pub(super) fn to_active_or_backoff(&self, st: &mut State, key: &str, event: &str) {
        let now = Instant::now();
        let Some(entry) = st.entries.get_mut(key) else {
            return;
        };
        if entry.preempting {
            if entry.pool != Pool::Unschedulable {
                entry.pool = Pool::Unschedulable;
                st.parked.insert(key.to_string());
                self.incoming("unschedulable", event);
            }
            return;
        }
        let info = entry.info.clone();
        let until = entry.backoff_until;
        if let Some(until) = until.filter(|_| self.backing_off(until, now)) {
            entry.pool = Pool::Backoff;
            self.push(st, info, Some(until));
            self.incoming("backoff", event);
        } else {
            entry.pool = Pool::Active;
            self.push(st, info, None);
            self.incoming("active", event);
        }
    }

    /// Whether `event` may make the pod schedulable (upstream's isPodWorthRequeuing): always
    /// for a pod no plugin rejected and for the wildcard events (a wildcard event about one pod
    /// only for that pod); else when a plugin that rejected it registered the event and hints
    /// `Queue`.
    pub(super) fn worth_requeuing(
        &self,
        info: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> bool {
        self.worth_requeuing_with(&mut HintsMemo::new(&*self.hints), info, event, old, new)
    }

    /// [`SchedulingQueue::worth_requeuing`], the profiles' hints looked up through `memo`: a
    /// walk over every parked pod asks the registry once per profile, not once per pod.
    pub(super) fn worth_requeuing_with(
        &self,
        memo: &mut HintsMemo<'_>,
        info: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> bool {
        if info.unschedulable_plugins.is_empty() {
            return true;
        }
        if event.is_wildcard() {
            return match new {
                None => true,
                Some(obj) => obj
                    .pod()
                    .is_some_and(|p| p.metadata.uid.as_deref() == Some(info.pod.uid())),
            };
        }
        match memo.of(pods::scheduler_name(&info.pod.pod)) {
            Some(hints) => {
                hints.worth_requeuing(&info.pod, &info.unschedulable_plugins, event, old, new)
            }
            // The profile is gone; the pod leaves the queue when the profile change is applied.
            None => true,
        }
    }

    /// A cluster event (upstream's MoveAllToActiveOrBackoffQueue): the pods in the
    /// unschedulable pool it may help move to activeQ or backoffQ, and it is kept for the pods
    /// in flight. An event no plugin registered does nothing.
    pub fn on_event(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        self.on_event_for(event, old, new, |_| true);
    }

    /// As [`SchedulingQueue::on_event`], moving only parked pods of priority `max_priority` or
    /// lower (upstream's getLEPriorityPreCheck, when a nominated pod gives up its room: a pod
    /// of higher priority never waited for that room). Pods in flight see the event whatever
    /// their priority, as upstream's.
    pub fn on_event_up_to_priority(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        max_priority: i32,
    ) {
        self.on_event_for(event, old, new, |e| {
            priority(&e.info.pod.pod) <= max_priority
        });
    }

    /// A cluster event: moves the parked pods among those `candidate` selects that it may
    /// help, and keeps it for the pods in flight. An event no plugin registered does nothing.
    fn on_event_for(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        candidate: impl Fn(&Entry) -> bool,
    ) {
        if !event.is_wildcard() && !self.hints.interested_in(&event) {
            return;
        }
        let mut st = self.lock();
        self.move_parked(&mut st, &event, old.as_ref(), new.as_ref(), candidate);
        self.move_gated(&mut st, &event, old.as_ref(), new.as_ref());
        Self::record(&mut st, event, old, new, None);
    }

    /// The pods PreEnqueue holds back whose gating plugin registered `event` and hints that it
    /// may help (a claim a pod waits for was created): PreEnqueue is asked again, and a pod
    /// nothing holds any more goes to activeQ, as upstream moves the gated pods of its
    /// unschedulable pool. SchedulingGates registers no event: its pods wait for their update.
    fn move_gated(
        &self,
        st: &mut State,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) {
        if st.gated.is_empty() {
            return;
        }
        let entries = &st.entries;
        st.gated
            .retain(|k| entries.get(k).is_some_and(|e| e.pool == Pool::Gated));
        let mut memo = HintsMemo::new(&*self.hints);
        let keys: Vec<String> = st
            .gated
            .iter()
            .filter_map(|k| st.entries.get(k).map(|e| (k, e)))
            .filter(|(_, e)| {
                let Some(gate) = e.info.gated_by else {
                    return false;
                };
                let name = pods::scheduler_name(&e.info.pod.pod);
                memo.of(name).is_some_and(|h| {
                    h.worth_requeuing_by(&e.info.pod, |p| p == gate, event, old, new)
                })
            })
            .map(|(k, _)| k.clone())
            .collect();
        let label = event.to_string();
        for key in keys {
            let Some(entry) = st.entries.get_mut(&key) else {
                continue;
            };
            let name = pods::scheduler_name(&entry.info.pod.pod).to_string();
            let gate = self.hints.pre_enqueue(&name, &entry.info.pod);
            entry.info.gated_by = gate;
            if gate.is_none() {
                self.ungate(st, &key, &label);
            }
        }
    }

    /// Tries `pod` again at once (upstream's PriorityQueue.Activate): from the unschedulable
    /// pool or backoffQ (its backoff skipped) into activeQ; a pod in flight gets the
    /// ForceActivate event, so that a failure of its attempt requeues it (to backoffQ while
    /// its backoff lasts, as upstream) rather than parking it, and so does an assumed pod not
    /// yet past Permit. A pod in activeQ, gated, or unknown to the queue is left as it is.
    pub fn activate(&self, pod: &Arc<Pod>) {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut st = self.lock();
        match st.entries.get(uid).map(|e| e.pool) {
            Some(Pool::Unschedulable | Pool::Backoff) => {
                let Some(entry) = st.entries.get_mut(uid) else {
                    return;
                };
                if entry.preempting {
                    return;
                }
                entry.pool = Pool::Active;
                let info = entry.info.clone();
                self.push(&mut st, info, None);
                self.incoming("active", &FORCE_ACTIVATE.to_string());
            }
            // In flight, or assumed and not yet past Permit (upstream's Done comes after
            // Permit): a rejection still to come would otherwise park it.
            Some(Pool::InFlight | Pool::Assumed)
                if st
                    .entries
                    .get(uid)
                    .is_some_and(|e| e.in_flight_from.is_some()) =>
            {
                Self::record(
                    &mut st,
                    FORCE_ACTIVATE,
                    None,
                    Some(EventObject::Pod(pod.clone())),
                    Some(uid.to_string()),
                )
            }
            _ => {}
        }
    }

    /// The preemption `uid` started is being carried out: until [`SchedulingQueue::preempted`],
    /// the pod is not tried again (upstream's DefaultPreemption gates it at PreEnqueue while
    /// its evictions run: a retry then would only find its victims still there, going).
    pub fn preempting(&self, uid: &str) {
        if let Some(entry) = self.lock().entries.get_mut(uid) {
            entry.preempting = true;
        }
    }

    /// The preemption's writes for `uid` ended. The pod waits, as any rejected pod, for an event
    /// that may help it (its victims' deletions, still to come); when `victims_gone` says
    /// they are all gone already (their deletions came while it was held), none will come,
    /// so it is moved now as their deletion would have moved it. `victims_gone` is asked after
    /// the hold ends and outside the queue's lock (it may read the cache, whose lock is taken
    /// before the queue's): a deletion that arrives in between moves the pod itself.
    pub fn preempted(&self, uid: &str, victims_gone: impl FnOnce() -> bool) {
        match self.lock().entries.get_mut(uid) {
            Some(entry) => entry.preempting = false,
            None => return,
        }
        if !victims_gone() {
            return;
        }
        let mut st = self.lock();
        if st
            .entries
            .get(uid)
            .is_some_and(|e| e.pool == Pool::Unschedulable && !e.preempting)
        {
            self.to_active_or_backoff(&mut st, uid, &ASSIGNED_POD_DELETE.to_string());
        }
    }

    /// Moves the parked pods that `event` may help among those `candidate` selects.
    pub(super) fn move_parked(
        &self,
        st: &mut State,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        candidate: impl Fn(&Entry) -> bool,
    ) -> usize {
        // Only the pool is looked at, not every queued pod: keys of pods that left it since are
        // dropped from it here.
        let entries = &st.entries;
        st.parked.retain(|k| {
            entries
                .get(k)
                .is_some_and(|e| e.pool == Pool::Unschedulable)
        });
        let mut memo = HintsMemo::new(&*self.hints);
        let keys: Vec<String> = st
            .parked
            .iter()
            .filter_map(|k| st.entries.get(k).map(|e| (k, e)))
            .filter(|(_, e)| candidate(e))
            .filter(|(_, e)| self.worth_requeuing_with(&mut memo, &e.info, event, old, new))
            .map(|(k, _)| k.clone())
            .collect();
        let label = event.to_string();
        for key in &keys {
            self.to_active_or_backoff(st, key, &label);
        }
        if !keys.is_empty() {
            tracing::debug!(event = %event, pods = keys.len(), "event moved pods out of the unschedulable pool");
        }
        keys.len()
    }

    /// The attempt failed (upstream's AddUnschedulableIfNotPresent). `plugins` rejected the
    /// pod; none means an error. A rejected pod waits in the unschedulable pool for an event
    /// that may help it, or goes to backoffQ at once when such an event arrived during its
    /// attempt; an error always backs off. With `retry_after` (a plugin's answer changes by
    /// itself then) it goes to backoffQ until then at least.
    pub fn add_unschedulable(
        &self,
        plugins: &[&'static str],
        uid: &str,
        backoff: Backoff,
        retry_after: Option<Duration>,
    ) {
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(uid) else {
            return;
        };
        if entry.deleted_while_in_flight {
            Self::remove(&mut st, uid);
            return;
        }
        if entry.unserved_after_flight {
            // Its profile went away during the attempt: it waits for one.
            Self::end_flight_unserved(&mut st, uid);
            return;
        }
        let now = Instant::now();
        let from = entry.in_flight_from.take();
        entry.info.unschedulable_plugins = plugins.iter().copied().collect();
        let error = plugins.is_empty();
        if error {
            entry.info.consecutive_errors_count += 1;
        } else {
            entry.info.unschedulable_count += 1;
            entry.info.consecutive_errors_count = 0;
        }
        entry.info.timestamp = now;
        let duration =
            backoff_duration(backoff_failures(&entry.info), backoff.initial, backoff.max);
        entry.backoff_until = (!duration.is_zero()).then(|| self.align(later(now, duration)));
        entry.full_backoff = error || retry_after.is_some();
        if let Some(after) = retry_after {
            entry.backoff_until = Some(
                entry
                    .backoff_until
                    .map_or(later(now, after), |u| u.max(later(now, after))),
            );
        }
        let info = entry.info.clone();
        let helped = error
            || retry_after.is_some()
            || from.is_some_and(|from| {
                st.in_flight_events
                    .iter()
                    .filter(|e| e.seq >= from)
                    .filter(|e| e.only_for.as_deref().is_none_or(|u| u == uid))
                    .any(|e| self.worth_requeuing(&info, &e.event, e.old.as_ref(), e.new.as_ref()))
            });
        Self::land(&mut st, from);
        if helped {
            self.to_active_or_backoff(&mut st, uid, ATTEMPT_FAILURE);
        } else if let Some(entry) = st.entries.get_mut(uid) {
            entry.pool = Pool::Unschedulable;
            st.parked.insert(uid.to_string());
            self.incoming("unschedulable", ATTEMPT_FAILURE);
        }
    }

    /// An error or a failed bind: retry after backoff, which doubles with the errors in a row.
    /// (The failure handler passes no plugins to `add_unschedulable`, which is the same.)
    #[cfg(test)]
    pub fn requeue_with_backoff(&self, uid: &str, backoff: Backoff) {
        self.add_unschedulable(&[], uid, backoff, None);
    }
}

impl crate::scheduler::framework::PodActivator for SchedulingQueue {
    fn activate(&self, pod: &Arc<Pod>) {
        SchedulingQueue::activate(self, pod);
    }
    fn preempting(&self, uid: &str) {
        SchedulingQueue::preempting(self, uid);
    }
    /// Without the cache, the queue cannot tell whether the victims are gone: it waits for their
    /// deletions (the scheduler's activator, which has the cache, tells).
    fn preempted(&self, uid: &str, _victims: &[Arc<Pod>]) {
        SchedulingQueue::preempted(self, uid, || false);
    }
}

/// The hints of each profile a walk over queued pods meets, asked of the registry once per
/// walk (a read lock and two reference counts each time, otherwise: at every pod added, for
/// every pod that waits).
pub(super) struct HintsMemo<'h> {
    source: &'h dyn HintSource,
    seen: Vec<(String, Option<Arc<QueueingHints>>)>,
}

impl<'h> HintsMemo<'h> {
    pub(super) fn new(source: &'h dyn HintSource) -> Self {
        HintsMemo {
            source,
            seen: Vec::new(),
        }
    }

    /// The hints of the profile serving `scheduler_name` (`None`: no profile serves it).
    pub(super) fn of(&mut self, scheduler_name: &str) -> Option<&Arc<QueueingHints>> {
        let at = match self
            .seen
            .iter()
            .position(|(name, _)| name == scheduler_name)
        {
            Some(at) => at,
            None => {
                let hints = self.source.hints(scheduler_name);
                self.seen.push((scheduler_name.to_string(), hints));
                self.seen.len() - 1
            }
        };
        self.seen.get(at).and_then(|(_, hints)| hints.as_ref())
    }
}

impl ClusterEvents for SchedulingQueue {
    fn on_event(&self, event: ClusterEvent, old: Option<EventObject>, new: Option<EventObject>) {
        SchedulingQueue::on_event(self, event, old, new);
    }
}
