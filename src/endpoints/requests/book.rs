//! What the answerer knows of the ExplainRequests: every request, and the unanswered ones in
//! the order each requester made them, requesters taking turns.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::api::{ExplainRequest, ExplainRequestSpec};

/// Requests one requester may have at once (answered or not, until deleted): past that, each
/// new one is refused (429). `tether explain` deletes its own once read.
pub const MAX_PER_REQUESTER: usize = 16;
/// How long an answered request is kept for its asker to read.
pub const ANSWERED_TTL: Duration = Duration::from_secs(600);
/// How long a refused request is kept.
pub const REFUSED_TTL: Duration = Duration::from_secs(60);
/// How long a request nobody answered is kept (tether was down, or its answer could not be
/// written).
pub const UNANSWERED_TTL: Duration = Duration::from_secs(3600);

/// A request as the answerer keeps it.
#[derive(Clone, Debug)]
pub struct Question {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    created: Option<Timestamp>,
    answered: Option<Timestamp>,
    refused: bool,
    /// Deletion asked for (its finalizers hold it).
    deleting: bool,
    /// Made while its requester had [`MAX_PER_REQUESTER`] requests already: refused.
    pub over: bool,
    pub spec: ExplainRequestSpec,
}

impl Question {
    fn of(request: &ExplainRequest) -> Option<Question> {
        let status = request.status.as_ref();
        Some(Question {
            namespace: request.namespace()?,
            name: request.name_any(),
            uid: request.uid()?,
            created: request.meta().creation_timestamp.as_ref().map(|t| t.0),
            answered: status.and_then(|s| s.answered_at.as_ref()).map(|t| t.0),
            refused: status.is_some_and(|s| s.refused.is_some()),
            deleting: request.meta().deletion_timestamp.is_some(),
            over: false,
            spec: request.spec.clone(),
        })
    }

    /// Whether it is past its time to live at `now`.
    fn expired(&self, now: Timestamp) -> bool {
        let older = |at: Option<Timestamp>, ttl: Duration| {
            at.is_some_and(|at| at <= now && now.duration_since(at).unsigned_abs() > ttl)
        };
        match self.answered {
            Some(_) if self.refused => older(self.answered, REFUSED_TTL),
            Some(_) => older(self.answered, ANSWERED_TTL),
            None => older(self.created, UNANSWERED_TTL),
        }
    }

    /// Who asks.
    pub fn requester(&self) -> &str {
        &self.spec.requester.username
    }

    pub fn key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }
}

/// A request's namespace and name.
pub type Key = (String, String);

/// The requests known, and the unanswered ones by requester.
#[derive(Default)]
pub struct Book {
    known: HashMap<Key, Question>,
    /// Each requester's unanswered requests, oldest first.
    waiting: BTreeMap<String, VecDeque<Key>>,
    /// The requests each requester has (answered or not, until deleted).
    per_requester: HashMap<String, usize>,
    /// The requester served last: the next turn goes to the one after it.
    last_served: Option<String>,
    /// The requests being answered now, with the uid each was handed out as.
    in_hand: HashMap<Key, String>,
}

impl Book {
    pub fn apply(&mut self, request: &ExplainRequest) {
        let Some(mut q) = Question::of(request) else {
            return;
        };
        let key = q.key();
        let old = self.known.get(&key);
        // A new request, or another made with the same name after the first went.
        let fresh = old.is_none_or(|old| old.uid != q.uid);
        if fresh {
            if let Some(old) = self.known.remove(&key) {
                self.forget(&old);
            }
            let had = self
                .per_requester
                .entry(q.requester().to_string())
                .or_default();
            q.over = *had >= MAX_PER_REQUESTER;
            *had += 1;
            if q.answered.is_none() && !q.deleting {
                self.waiting
                    .entry(q.requester().to_string())
                    .or_default()
                    .push_back(key.clone());
            }
        } else if let Some(old) = old {
            q.over = old.over;
        }
        self.known.insert(key, q);
    }

    pub fn delete(&mut self, request: &ExplainRequest) {
        let Some(namespace) = request.namespace() else {
            return;
        };
        let key = (namespace, request.name_any());
        if self
            .known
            .get(&key)
            .is_some_and(|q| Some(&q.uid) == request.metadata.uid.as_ref())
            && let Some(old) = self.known.remove(&key)
        {
            self.forget(&old);
        }
    }

    fn forget(&mut self, q: &Question) {
        if let Some(n) = self.per_requester.get_mut(q.requester()) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_requester.remove(q.requester());
            }
        }
    }

    /// Starts over from a list: what the list does not hold is forgotten.
    pub fn reset(&mut self, listed: Vec<ExplainRequest>) {
        let in_hand = std::mem::take(&mut self.in_hand);
        let last_served = self.last_served.take();
        *self = Book::default();
        self.in_hand = in_hand;
        self.last_served = last_served;
        for request in &listed {
            self.apply(request);
        }
    }

    /// How many requests `requester` has.
    #[cfg(test)]
    fn requests_of(&self, requester: &str) -> usize {
        self.per_requester.get(requester).copied().unwrap_or(0)
    }

    /// The next question to answer: the oldest waiting one of the requester after the one
    /// served last (in name order, wrapping), among those `ready` lets through. It is in hand
    /// until [`Book::done`].
    pub fn next(&mut self, mut ready: impl FnMut(&str) -> bool) -> Option<Question> {
        let after = self.last_served.clone().unwrap_or_default();
        let order: Vec<String> = self
            .waiting
            .range::<String, _>((
                std::ops::Bound::Excluded(&after),
                std::ops::Bound::Unbounded,
            ))
            .chain(self.waiting.range::<String, _>(..=&after))
            .map(|(requester, _)| requester.clone())
            .collect();
        for requester in order {
            let queue = self.waiting.get_mut(&requester)?;
            // Forget the requests answered, deleted or in hand meanwhile.
            while let Some(key) = queue.front() {
                match self.known.get(key) {
                    Some(q)
                        if q.answered.is_none()
                            && !q.deleting
                            && !self.in_hand.contains_key(key) =>
                    {
                        break;
                    }
                    _ => {
                        queue.pop_front();
                    }
                }
            }
            if queue.is_empty() {
                self.waiting.remove(&requester);
                continue;
            }
            if !ready(&requester) {
                continue;
            }
            let key = queue.pop_front()?;
            if queue.is_empty() {
                self.waiting.remove(&requester);
            }
            let q = self.known.get(&key)?.clone();
            self.last_served = Some(requester);
            self.in_hand.insert(key, q.uid.clone());
            return Some(q);
        }
        None
    }

    /// `key`, handed out as `uid`, is no longer in hand; `again`: it was not answered and is
    /// asked again first (when it is still the same request and unanswered).
    pub fn done(&mut self, key: &Key, uid: &str, again: bool) {
        self.in_hand.remove(key);
        if !again {
            return;
        }
        if let Some(q) = self.known.get(key)
            && q.uid == uid
            && q.answered.is_none()
            && !q.deleting
        {
            self.waiting
                .entry(q.requester().to_string())
                .or_default()
                .push_front(key.clone());
        }
    }

    /// Up to `most` requests past their time to live at `now` (none in hand or being deleted),
    /// each with its uid.
    pub fn expired(&self, now: Timestamp, most: usize) -> Vec<(Key, String)> {
        self.known
            .iter()
            .filter(|(key, q)| !q.deleting && q.expired(now) && !self.in_hand.contains_key(*key))
            .take(most)
            .map(|(key, q)| (key.clone(), q.uid.clone()))
            .collect()
    }

    /// `key` is being deleted: not handed out or deleted again.
    pub fn deleting(&mut self, key: &Key) {
        if let Some(q) = self.known.get_mut(key) {
            q.deleting = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ExplainRequestStatus, Refusal, Requester};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn request(namespace: &str, name: &str, who: &str, answered: bool) -> ExplainRequest {
        let mut r = ExplainRequest::new(
            name,
            ExplainRequestSpec {
                pod: Some("web-0".into()),
                requester: Requester {
                    username: who.into(),
                    ..Default::default()
                },
            },
        );
        r.metadata.namespace = Some(namespace.into());
        r.metadata.uid = Some(format!("uid-{namespace}-{name}"));
        r.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        if answered {
            r.status = Some(ExplainRequestStatus {
                answered_at: Some(Time(Timestamp::now())),
                ..Default::default()
            });
        }
        r
    }

    /// A user who asks a thousand questions, in many namespaces, does not keep another's one
    /// waiting: turns rotate over the requesters.
    #[test]
    fn requesters_take_turns() {
        let mut book = Book::default();
        for i in 0..1000 {
            book.apply(&request(
                &format!("ns-{}", i % 7),
                &format!("q{i}"),
                "bob",
                false,
            ));
        }
        book.apply(&request("ns-0", "one", "alice", false));
        let first: Vec<String> = (0..2)
            .filter_map(|_| book.next(|_| true))
            .map(|q| q.requester().to_string())
            .collect();
        assert_eq!(first, ["alice", "bob"]);
        assert_eq!(book.requests_of("bob"), 1000);
        // Bob's first 16 are answered, the rest refused, whenever they are handed out.
        let over: Vec<bool> = (0..20)
            .map(|i| book.known[&(format!("ns-{}", i % 7), format!("q{i}"))].over)
            .collect();
        assert_eq!(over.iter().filter(|o| !**o).count(), 16, "{over:?}");
        assert!(over[16..].iter().all(|o| *o));
        // A requester out of budget is passed over; the others are served.
        book.apply(&request("ns-1", "two", "carol", false));
        let next = book.next(|who| who != "bob").map(|q| q.name);
        assert_eq!(next.as_deref(), Some("two"));
    }

    /// Answered requests are not asked again; a deleted one is forgotten; one in hand is not
    /// handed out twice, a re-list included; one whose answer was not written is asked again.
    #[test]
    fn only_unanswered_requests_are_handed_out_once() {
        let mut book = Book::default();
        book.apply(&request("a", "done", "alice", true));
        book.apply(&request("a", "open", "alice", false));
        book.apply(&request("a", "gone", "alice", false));
        book.delete(&request("a", "gone", "alice", false));
        assert_eq!(book.requests_of("alice"), 2);
        let q = book.next(|_| true).expect("one question");
        assert_eq!(q.name, "open");
        assert!(book.next(|_| true).is_none(), "handed out twice");
        book.reset(vec![request("a", "open", "alice", false)]);
        assert!(
            book.next(|_| true).is_none(),
            "handed out again after a re-list"
        );
        book.done(&q.key(), &q.uid, true);
        assert_eq!(book.next(|_| true).map(|q| q.name).as_deref(), Some("open"));
    }

    /// A request made again with the same name while the first is in hand is a new one: asked
    /// once the first is done, and the first's answer is not for it.
    #[test]
    fn a_request_made_again_with_the_same_name_is_a_new_one() {
        let mut book = Book::default();
        book.apply(&request("a", "q", "alice", false));
        let first = book.next(|_| true).expect("the first");
        let mut again = request("a", "q", "bob", false);
        again.metadata.uid = Some("uid-2".into());
        book.apply(&again);
        assert_eq!(book.requests_of("alice"), 0);
        assert_eq!(book.requests_of("bob"), 1);
        book.done(&first.key(), &first.uid, true);
        let second = book.next(|_| true).expect("the second");
        assert_eq!((second.uid.as_str(), second.requester()), ("uid-2", "bob"));
    }

    #[test]
    fn old_requests_expire_refusals_sooner() {
        let mut book = Book::default();
        let ago = |minutes: i64| Time(Timestamp::now() - jiff::SignedDuration::from_mins(minutes));
        let mut old = request("a", "old", "alice", true);
        if let Some(s) = old.status.as_mut() {
            s.answered_at = Some(ago(11));
        }
        book.apply(&old);
        book.apply(&request("a", "new", "alice", true));
        let mut refused = request("a", "refused", "alice", true);
        if let Some(s) = refused.status.as_mut() {
            s.answered_at = Some(ago(2));
            s.refused = Some(Refusal::default());
        }
        book.apply(&refused);
        let mut stale = request("a", "stale", "alice", false);
        stale.metadata.creation_timestamp = Some(ago(61));
        book.apply(&stale);
        let mut held = request("a", "held", "alice", false);
        held.metadata.creation_timestamp = Some(ago(61));
        held.metadata.deletion_timestamp = Some(ago(1));
        book.apply(&held);
        let mut expired: Vec<String> = book
            .expired(Timestamp::now(), 10)
            .into_iter()
            .map(|((_, name), _)| name)
            .collect();
        expired.sort();
        assert_eq!(
            expired,
            ["old", "refused", "stale"],
            "not one being deleted"
        );
        assert_eq!(
            book.expired(Timestamp::now(), 1).len(),
            1,
            "at most as many as asked"
        );
    }
}
