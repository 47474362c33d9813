//! The reference's 13 counters and their Prometheus text exposition.

use serde::{Deserialize, Serialize};

/// One of the 13 counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Counter {
    /// acquire got past input validation.
    AcquireAttempts,
    /// acquire won the lease.
    AcquireWins,
    /// acquire found the run held or lost the race.
    AcquireCollisions,
    /// renew succeeded.
    Renews,
    /// renew was refused.
    RenewFailures,
    /// release succeeded.
    Releases,
    /// release was refused.
    ReleaseFailures,
    /// a dead holder's run was recovered (sweep, takeover or liveness).
    Reclaims,
    /// a run was quarantined.
    Quarantines,
    /// verify accepted a token.
    FenceVerifications,
    /// verify refused a token.
    FenceRejections,
    /// an effect fired and was recorded.
    EffectCommits,
    /// an effect was deduplicated.
    EffectDedupes,
}

impl Counter {
    /// All counters in the reference's order.
    pub const ALL: [Counter; 13] = [
        Counter::AcquireAttempts,
        Counter::AcquireWins,
        Counter::AcquireCollisions,
        Counter::Renews,
        Counter::RenewFailures,
        Counter::Releases,
        Counter::ReleaseFailures,
        Counter::Reclaims,
        Counter::Quarantines,
        Counter::FenceVerifications,
        Counter::FenceRejections,
        Counter::EffectCommits,
        Counter::EffectDedupes,
    ];

    /// The reference's camelCase name.
    pub fn name(self) -> &'static str {
        match self {
            Counter::AcquireAttempts => "acquireAttempts",
            Counter::AcquireWins => "acquireWins",
            Counter::AcquireCollisions => "acquireCollisions",
            Counter::Renews => "renews",
            Counter::RenewFailures => "renewFailures",
            Counter::Releases => "releases",
            Counter::ReleaseFailures => "releaseFailures",
            Counter::Reclaims => "reclaims",
            Counter::Quarantines => "quarantines",
            Counter::FenceVerifications => "fenceVerifications",
            Counter::FenceRejections => "fenceRejections",
            Counter::EffectCommits => "effectCommits",
            Counter::EffectDedupes => "effectDedupes",
        }
    }

    fn prometheus_name(self) -> String {
        let mut out = String::from("heart_fleet_");
        for c in self.name().chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out.push_str("_total");
        out
    }
}

/// The 13 counters (`heart.metrics` in the reference), serialized with its camelCase keys in its order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct HeartMetrics {
    pub acquire_attempts: u64,
    pub acquire_wins: u64,
    pub acquire_collisions: u64,
    pub renews: u64,
    pub renew_failures: u64,
    pub releases: u64,
    pub release_failures: u64,
    pub reclaims: u64,
    pub quarantines: u64,
    pub fence_verifications: u64,
    pub fence_rejections: u64,
    pub effect_commits: u64,
    pub effect_dedupes: u64,
}

impl HeartMetrics {
    fn slot(&mut self, c: Counter) -> &mut u64 {
        match c {
            Counter::AcquireAttempts => &mut self.acquire_attempts,
            Counter::AcquireWins => &mut self.acquire_wins,
            Counter::AcquireCollisions => &mut self.acquire_collisions,
            Counter::Renews => &mut self.renews,
            Counter::RenewFailures => &mut self.renew_failures,
            Counter::Releases => &mut self.releases,
            Counter::ReleaseFailures => &mut self.release_failures,
            Counter::Reclaims => &mut self.reclaims,
            Counter::Quarantines => &mut self.quarantines,
            Counter::FenceVerifications => &mut self.fence_verifications,
            Counter::FenceRejections => &mut self.fence_rejections,
            Counter::EffectCommits => &mut self.effect_commits,
            Counter::EffectDedupes => &mut self.effect_dedupes,
        }
    }

    /// Adds one.
    pub fn bump(&mut self, c: Counter) {
        *self.slot(c) += 1;
    }

    /// Takes `delta` back from every counter: what it counted did not happen (an operation
    /// whose writes were rolled back with their receipts).
    pub fn remove(&mut self, delta: &HeartMetrics) {
        for c in Counter::ALL {
            let slot = self.slot(c);
            *slot = slot.saturating_sub(delta.get(c));
        }
    }

    /// Sets one counter.
    pub fn set(&mut self, c: Counter, value: u64) {
        *self.slot(c) = value;
    }

    /// The value of one counter.
    pub fn get(&self, c: Counter) -> u64 {
        let mut copy = *self;
        *copy.slot(c)
    }

    /// Prometheus text exposition format (version 0.0.4), one counter family each.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        for c in Counter::ALL {
            let name = c.prometheus_name();
            out.push_str(&format!(
                "# HELP {name} heart-fleet {} counter.\n# TYPE {name} counter\n{name} {}\n",
                c.name(),
                self.get(c)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_takes_back_each_counter_and_stops_at_zero() {
        let mut m = HeartMetrics::default();
        m.bump(Counter::AcquireAttempts);
        m.bump(Counter::AcquireAttempts);
        m.bump(Counter::AcquireWins);
        let mut delta = HeartMetrics::default();
        delta.bump(Counter::AcquireAttempts);
        delta.bump(Counter::AcquireWins);
        delta.bump(Counter::Reclaims);
        m.remove(&delta);
        assert_eq!((m.acquire_attempts, m.acquire_wins, m.reclaims), (1, 0, 0));
    }

    #[test]
    fn prometheus_names_and_values() {
        let mut m = HeartMetrics::default();
        m.bump(Counter::AcquireWins);
        m.bump(Counter::AcquireWins);
        let text = m.to_prometheus();
        assert!(text.contains("# TYPE heart_fleet_acquire_wins_total counter\nheart_fleet_acquire_wins_total 2\n"));
        assert!(text.contains("heart_fleet_effect_dedupes_total 0\n"));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 13);
    }

    #[test]
    fn json_keys_are_the_references() {
        let v = serde_json::to_value(HeartMetrics::default()).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        let want: Vec<_> = Counter::ALL.iter().map(|c| c.name().to_owned()).collect();
        let mut sorted_want = want.clone();
        sorted_want.sort();
        assert_eq!(keys, sorted_want); // serde_json's map sorts; the set is what matters
    }
}
