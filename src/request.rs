//! What a caller asks for, checked before any I/O: resource names become
//! keys (with the prefix), a ttl is rounded to Redis' milliseconds and
//! checked against the drift allowance, and keys that one script must touch
//! together are checked to share a Redis Cluster slot. Also the names of
//! the keys and channels that live beside a lock's key.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;

use crate::error::{ArgumentError, Error};
use crate::keys::{FENCE_MARK_SUFFIX, FENCE_SUFFIX, RELEASED_SUFFIX};
use crate::quorum::drift;
use crate::token::Token;

/// The largest accepted lock time-to-live: [`Redlock::MAX_TTL`](crate::Redlock::MAX_TTL).
pub(crate) const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A lock's Redis keys, shared cheaply by its guard and background tasks.
pub(crate) type Keys = Arc<[Arc<str>]>;

/// Which lock primitive a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One key: `SET key token NX PX ttl`.
    Plain,
    /// One key and its fence counter.
    Fenced,
    /// Several keys, all or none.
    Many,
}

/// Whether a request wants a fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fencing {
    Off,
    On,
}

/// What the manager's configuration says about requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    /// Prepended to every resource name to form its key.
    pub(crate) prefix: &'a str,
    pub(crate) drift_factor: f64,
    /// Whether some node is a Redis Cluster, where one script's keys must
    /// share a hash slot.
    pub(crate) cluster: bool,
}

impl Limits<'_> {
    /// The key of the resource `name`, for every primitive: the prefix and
    /// the name. An empty name is refused.
    pub(crate) fn key(&self, name: &str) -> Result<Arc<str>, Error> {
        if name.is_empty() {
            return Err(ArgumentError::EmptyResource.into());
        }
        Ok(if self.prefix.is_empty() {
            Arc::from(name)
        } else {
            Arc::from(format!("{}{name}", self.prefix))
        })
    }

    /// Refuses `keys` that one script touches together if some node is a
    /// Redis Cluster and they do not share a hash slot: now, with an
    /// explanation, rather than on every cluster node later. The one
    /// cross-slot check, for every primitive. The error names every key,
    /// or for more than [`NAMED`] keys the first and one outside its slot.
    pub(crate) fn one_slot(&self, keys: &[&str]) -> Result<(), Error> {
        /// The most keys a cross-slot error lists.
        const NAMED: usize = 4;
        if !self.cluster || same_slot(keys) {
            return Ok(());
        }
        let named: Vec<&str> = match keys {
            [first, ..] if keys.len() > NAMED => {
                let slot = Slot::for_key(first);
                let elsewhere = keys.iter().find(|k| Slot::for_key(k) != slot);
                std::iter::once(*first).chain(elsewhere.copied()).collect()
            }
            _ => keys.to_vec(),
        };
        Err(ArgumentError::CrossSlot {
            keys: named.into_iter().map(str::to_owned).collect(),
        }
        .into())
    }
}

/// What an acquisition is for, whatever the primitive: its name, the keys
/// a grant holds, and the ttl it asks for.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The name errors and logs give it: a resource (the names joined by
    /// `+` for a multi-lock), or a semaphore's or reader-writer lock's.
    pub(crate) resource: Arc<str>,
    /// The keys a grant holds (and a failed attempt releases).
    pub(crate) keys: Keys,
    pub(crate) ttl: Ttl,
}

impl Target {
    /// A call's tracing span for it, for operation `op`: its name and ttl.
    pub(crate) fn span(&self, op: &'static str) -> tracing::Span {
        tracing::debug_span!("quorumlock", op, resource = %self.resource, ttl_ms = self.ttl.ms())
    }
}

/// A fenced lock's keys beside its own: its fence counter, and the
/// counter's mark, which says which call last raised the counter to which
/// value, so that a call's retries reuse the value its failed attempt took
/// rather than raise it again (see `src/lock/acquire_fenced.lua`).
#[derive(Debug, Clone)]
pub(crate) struct FenceKeys {
    /// `<key>:fence`: never expires.
    pub(crate) counter: Arc<str>,
    /// `<key>:fence:mark`: a hash of the call's id and the value it
    /// raised the counter to, with the lock's ttl.
    pub(crate) mark: Arc<str>,
    /// This call's id, the same for each of its attempts.
    pub(crate) call: Arc<str>,
}

impl FenceKeys {
    /// The counter and mark beside the lock key `key`, for the call `call`:
    /// the one place their names are formed.
    pub(crate) fn beside(key: &str, call: Arc<str>) -> Self {
        Self {
            counter: Arc::from(format!("{key}{FENCE_SUFFIX}")),
            mark: Arc::from(format!("{key}{FENCE_MARK_SUFFIX}")),
            call,
        }
    }
}

/// One validated lock request.
#[derive(Debug)]
pub(crate) struct Request {
    /// The resource (or resources) and ttl; one key per resource: the
    /// prefix and the resource name.
    pub(crate) target: Target,
    /// A fenced lock's counter and mark.
    pub(crate) fence: Option<FenceKeys>,
    pub(crate) kind: Kind,
}

impl Request {
    /// Validates a (multi-)resource request. No I/O.
    pub(crate) fn new(
        resources: &[&str],
        ttl: Duration,
        fencing: Fencing,
        limits: Limits<'_>,
    ) -> Result<Self, Error> {
        if resources.is_empty() {
            return Err(ArgumentError::NoResources.into());
        }
        // Every name's key, which refuses an empty one (before a repeated
        // one is looked for).
        let keys: Keys = resources
            .iter()
            .map(|resource| limits.key(resource))
            .collect::<Result<_, _>>()?;
        for (i, resource) in resources.iter().enumerate() {
            if resources[..i].contains(resource) {
                return Err(ArgumentError::DuplicateResource {
                    resource: (*resource).to_owned(),
                }
                .into());
            }
        }
        let ttl = Ttl::new(ttl, limits.drift_factor)?;
        let (fence, kind) = match (&*keys, fencing) {
            ([_], Fencing::Off) => (None, Kind::Plain),
            (_, Fencing::Off) => (None, Kind::Many),
            ([key], Fencing::On) => (
                Some(FenceKeys::beside(
                    key,
                    Arc::from(Token::generate()?.as_str()),
                )),
                Kind::Fenced,
            ),
            // Not offered by the public API; refuse rather than guess.
            (_, Fencing::On) => return Err(ArgumentError::NoResources.into()),
        };
        // One script touches them all (only a cluster cares: nothing to
        // collect on the way to every other lock).
        if limits.cluster {
            let mut all_keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
            if let Some(fence) = &fence {
                all_keys.extend([&*fence.counter, &*fence.mark]);
            }
            limits.one_slot(&all_keys)?;
        }
        let resource = match (resources, &*keys) {
            // Without a prefix the key is the resource name: share it.
            ([one], [key]) if **key == **one => key.clone(),
            ([one], _) => Arc::from(*one),
            (many, _) => Arc::from(many.join("+")),
        };
        Ok(Request {
            target: Target {
                resource,
                keys,
                ttl,
            },
            fence,
            kind,
        })
    }
}

/// A lock's time-to-live as the nodes are given it: whole milliseconds
/// (Redis' resolution), so that validity is computed from what the nodes
/// were told and never overstated. Made from a caller's [`Duration`] by
/// [`new`](Self::new), which checks it; it travels down to the requests
/// as it is, rather than as a `Duration` with its milliseconds beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Ttl {
    ms: u64,
}

impl Ttl {
    /// A caller's `ttl`, rounded down to whole milliseconds and checked:
    /// [`ArgumentError::TtlTooLong`] above [`MAX_TTL`],
    /// [`ArgumentError::ZeroTtl`] under a millisecond, and
    /// [`ArgumentError::TtlNotAboveDrift`] if the drift allowance (with
    /// `drift_factor`, see [`drift`]) leaves no validity.
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Result<Self, Error> {
        if ttl > MAX_TTL {
            return Err(ArgumentError::TtlTooLong { ttl, max: MAX_TTL }.into());
        }
        // Cannot truncate: MAX_TTL in ms fits u64 by far.
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(ArgumentError::ZeroTtl.into());
        }
        let ttl = Self { ms };
        let drift = drift(ttl.duration(), drift_factor);
        if ttl.duration() <= drift {
            return Err(ArgumentError::TtlNotAboveDrift {
                ttl: ttl.duration(),
                drift,
            }
            .into());
        }
        Ok(ttl)
    }

    /// A ttl of `ms` milliseconds the crate sets itself (a probe's key, an
    /// election's leader value), not a caller's: unchecked.
    pub(crate) const fn from_millis(ms: u64) -> Self {
        Self { ms }
    }

    /// The ttl, for validity windows and errors.
    pub(crate) const fn duration(self) -> Duration {
        Duration::from_millis(self.ms)
    }

    /// The ttl in milliseconds, as the nodes are sent it (`PX`, the
    /// scripts' ttl arguments).
    pub(crate) const fn ms(self) -> u64 {
        self.ms
    }
}

/// The channel a lock key's releases are announced on.
pub(crate) fn channel(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + RELEASED_SUFFIX.len());
    name.push_str(key);
    name.push_str(RELEASED_SUFFIX);
    name
}

/// Whether every key hashes to the same Redis Cluster slot, so that one
/// script call may touch them all on a cluster node: the `{hash tag}` rule,
/// then CRC16 (XMODEM) modulo 16384. True for no keys or one key.
///
/// Only keys sharing a hash tag are guaranteed to share a slot, e.g.
/// `{lock_goods}:300` and `{lock_goods}:300:fence`.
pub(crate) fn same_slot(keys: &[&str]) -> bool {
    let mut slots = keys.iter().map(Slot::for_key);
    match slots.next() {
        Some(first) => slots.all(|slot| slot == first),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits<'static> = Limits {
        prefix: "",
        drift_factor: 0.01,
        cluster: false,
    };

    #[test]
    fn the_kind_follows_the_keys_and_the_fencing() {
        let ttl = Duration::from_secs(1);
        let kind = |resources: &[&str], fencing| {
            Request::new(resources, ttl, fencing, LIMITS).map(|r| r.kind)
        };
        assert_eq!(kind(&["a"], Fencing::Off).ok(), Some(Kind::Plain));
        assert_eq!(kind(&["a", "b"], Fencing::Off).ok(), Some(Kind::Many));
        assert_eq!(kind(&["a"], Fencing::On).ok(), Some(Kind::Fenced));
        assert!(kind(&["a", "b"], Fencing::On).is_err());
        let fenced = Request::new(&["a"], ttl, Fencing::On, LIMITS).expect("valid");
        let keys = fenced.fence.expect("fenced");
        assert_eq!((&*keys.counter, &*keys.mark), ("a:fence", "a:fence:mark"));
        // Each call its own id, the same for all of its attempts.
        let again = Request::new(&["a"], ttl, Fencing::On, LIMITS).expect("valid");
        assert_ne!(keys.call, again.fence.expect("fenced").call);
    }

    #[test]
    fn keys_carry_the_prefix_and_the_resource_keeps_its_name() {
        let limits = Limits {
            prefix: "app:",
            ..LIMITS
        };
        let one =
            Request::new(&["r"], Duration::from_secs(1), Fencing::Off, limits).expect("valid");
        assert_eq!(&*one.target.resource, "r");
        assert_eq!(&*one.target.keys[0], "app:r");
        let many =
            Request::new(&["r", "s"], Duration::from_secs(1), Fencing::Off, limits).expect("valid");
        assert_eq!(&*many.target.resource, "r+s");
    }

    #[test]
    fn a_ttl_is_rounded_down_to_whole_milliseconds() {
        let ttl = Ttl::new(Duration::from_micros(3_999), 0.0).expect("valid");
        assert_eq!(ttl.ms(), 3);
        assert_eq!(ttl.duration(), Duration::from_millis(3));
        let ttl = Ttl::new(Duration::from_secs(10), 0.01).expect("valid");
        assert_eq!(
            (ttl.ms(), ttl.duration()),
            (10_000, Duration::from_secs(10))
        );
    }

    #[test]
    fn a_ttl_under_a_millisecond_is_refused() {
        for ttl in [Duration::ZERO, Duration::from_micros(999)] {
            assert!(matches!(
                Ttl::new(ttl, 0.0),
                Err(Error::InvalidArgument(ArgumentError::ZeroTtl))
            ));
        }
    }

    #[test]
    fn a_ttl_is_at_most_max_ttl() {
        assert_eq!(
            Ttl::new(MAX_TTL, 0.01).map(Ttl::duration).ok(),
            Some(MAX_TTL)
        );
        let over = MAX_TTL + Duration::from_millis(1);
        assert!(matches!(
            Ttl::new(over, 0.01),
            Err(Error::InvalidArgument(ArgumentError::TtlTooLong { ttl, max }))
                if ttl == over && max == MAX_TTL
        ));
    }

    #[test]
    fn a_ttl_must_leave_validity_after_the_drift() {
        // The drift is 2 ms at least: a 2 ms ttl leaves nothing, 3 ms does.
        assert!(matches!(
            Ttl::new(Duration::from_millis(2), 0.0),
            Err(Error::InvalidArgument(ArgumentError::TtlNotAboveDrift { ttl, drift }))
                if ttl == Duration::from_millis(2) && drift == Duration::from_millis(2)
        ));
        assert!(Ttl::new(Duration::from_millis(3), 0.0).is_ok());
        // Checked after rounding: 2.9 ms is 2 ms on the nodes.
        assert!(Ttl::new(Duration::from_micros(2_900), 0.0).is_err());
        // With a factor of a half, 100 ms drifts 52 ms: still valid.
        assert!(Ttl::new(Duration::from_millis(100), 0.5).is_ok());
        assert!(Ttl::new(Duration::from_millis(4), 0.5).is_err());
    }

    /// Slots as `redis-cli CLUSTER KEYSLOT` reports them (Redis 7.0).
    const KNOWN_SLOTS: [(&str, u16); 9] = [
        ("foo", 12182),
        ("bar", 5061),
        ("123456789", 12739),
        ("{user1000}.following", 3443),
        ("{lock_goods}:300", 2307),
        ("{lock_goods}", 2307),
        ("", 0),
        // An empty tag is no tag: the whole key is hashed.
        ("{}{x}", 3257),
        ("a{}b", 13694),
    ];

    #[test]
    fn slots_match_the_ones_redis_computes() {
        for (key, slot) in KNOWN_SLOTS {
            assert_eq!(Slot::new(slot), Some(Slot::for_key(key)), "{key:?}");
        }
    }

    #[test]
    fn keys_share_a_slot_only_by_hash_tag_or_chance() {
        assert!(same_slot(&[]));
        assert!(same_slot(&["foo"]));
        assert!(same_slot(&["{lock_goods}:300", "{lock_goods}:300:fence"]));
        assert!(same_slot(&[
            "{lock_goods}:300",
            "{lock_goods}",
            "x{lock_goods}"
        ]));
        // Only the first `{…}` counts.
        assert!(same_slot(&["{a}{b}", "{a}{c}"]));
        assert!(!same_slot(&["foo", "bar"]));
        assert!(!same_slot(&["lock_goods:300", "lock_goods:300:fence"]));
        assert!(!same_slot(&["{lock_goods}:300", "{lock_goods}:300", "bar"]));
        // An empty tag hashes the whole key.
        assert!(!same_slot(&["{}a", "{}b"]));
    }

    #[test]
    fn keys_that_cannot_share_a_slot_are_named_on_a_cluster_only() {
        let cluster = Limits {
            cluster: true,
            ..LIMITS
        };
        // `a` and `b` hash to different slots; a hash tag shares one.
        assert!(LIMITS.one_slot(&["a", "b"]).is_ok(), "no cluster: no check");
        assert!(cluster.one_slot(&["{t}a", "{t}b", "{t}c"]).is_ok());
        assert!(cluster.one_slot(&[]).is_ok() && cluster.one_slot(&["a"]).is_ok());
        let named = |keys: &[&str]| match cluster.one_slot(keys) {
            Err(Error::InvalidArgument(ArgumentError::CrossSlot { keys })) => keys,
            other => panic!("expected CrossSlot, got {other:?}"),
        };
        assert_eq!(named(&["a", "b"]), ["a", "b"]);
        // Of many keys, the first and one outside its slot.
        let many = ["{t}0", "{t}1", "{t}2", "{t}3", "other"];
        assert_eq!(named(&many), ["{t}0", "other"]);
    }

    #[test]
    fn a_key_is_the_prefix_and_the_name_and_never_empty() {
        let prefixed = Limits {
            prefix: "app:",
            ..LIMITS
        };
        assert_eq!(&*LIMITS.key("x").expect("key"), "x");
        assert_eq!(&*prefixed.key("x").expect("key"), "app:x");
        for limits in [LIMITS, prefixed] {
            assert!(matches!(
                limits.key(""),
                Err(Error::InvalidArgument(ArgumentError::EmptyResource))
            ));
        }
    }
}
