//! A mergeable quantile sketch with a relative-error guarantee (DDSketch, Masson, Rim and Lee,
//! VLDB 2019): what rollups keep for the series route's percentiles on devices with
//! `percentiles: true`.
//!
//! A value `v` lands in bin `ceil(log_γ |v|)` of its sign's store (zero in its own count),
//! with `γ = (1 + α) / (1 − α)` and `α` = [`RELATIVE_ACCURACY`]; a bin answers with the value
//! whose relative distance to both its edges is `α`. So the value a sketch gives for a rank is
//! within `α` (relative) of the value at that rank among the readings, for every rank. Bins
//! add, so a merge is exact: a day's sketch from its hours' sketches is the sketch of the
//! day's readings.
//!
//! Each sign keeps at most [`MAX_BINS`] bins (a ratio of about 10^17 between its largest and
//! smallest magnitude); past that the smallest magnitudes share the lowest bin, and only
//! quantiles falling there lose the guarantee. Stored as a DynamoDB binary attribute: a
//! version byte, then varints (the zero count, then per store the bin count, the first key
//! and each bin's key gap and count), about two bytes per occupied bin.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The relative error of every quantile a sketch gives.
pub const RELATIVE_ACCURACY: f64 = 0.01;

/// Bins per sign, at most.
pub const MAX_BINS: usize = 2048;

const FORMAT: u8 = 1;

fn gamma() -> f64 {
    (1.0 + RELATIVE_ACCURACY) / (1.0 - RELATIVE_ACCURACY)
}

/// The bin of a magnitude (positive, finite).
fn key(magnitude: f64) -> i32 {
    // |ln| of a finite f64 is below 745: the key stays within ±37,000.
    (magnitude.ln() / gamma().ln()).ceil() as i32
}

/// The value a bin answers with: `α` (relative) from both its edges.
fn bin_value(k: i32) -> f64 {
    let g = gamma();
    2.0 * g.powi(k) / (g + 1.0)
}

/// The bins of one sign: `counts[i]` is bin `offset + i`.
#[derive(Debug, Clone, Default, PartialEq)]
struct Bins {
    offset: i32,
    counts: Vec<u64>,
}

impl Bins {
    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn top(&self) -> i32 {
        self.offset + self.counts.len() as i32 - 1
    }

    fn add(&mut self, k: i32, n: u64) {
        if n == 0 {
            return;
        }
        if self.counts.is_empty() {
            self.offset = k;
            self.counts.push(n);
            return;
        }
        let top = self.top().max(k);
        let lowest = top - (MAX_BINS as i32 - 1);
        let k = k.max(lowest);
        if k < self.offset {
            let grow = (self.offset - k) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.offset = k;
        }
        let i = (k - self.offset) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
        if self.offset < lowest {
            let cut = (lowest - self.offset) as usize;
            let folded: u64 = self.counts.drain(..cut).sum();
            self.counts[0] += folded;
            self.offset = lowest;
        }
    }

    fn occupied(&self) -> impl DoubleEndedIterator<Item = (i32, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (self.offset + i as i32, *c))
    }
}

/// See the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    zeros: u64,
    positive: Bins,
    negative: Bins,
}

impl Sketch {
    pub fn of(v: f64) -> Sketch {
        let mut s = Sketch::default();
        s.add(v);
        s
    }

    /// Adds a reading (a non-finite value is not a reading and is left out).
    pub fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        if v.abs() < f64::MIN_POSITIVE {
            self.zeros += 1;
        } else if v > 0.0 {
            self.positive.add(key(v), 1);
        } else {
            self.negative.add(key(-v), 1);
        }
    }

    pub fn merge(&mut self, o: &Sketch) {
        self.zeros += o.zeros;
        for (k, c) in o.positive.occupied() {
            self.positive.add(k, c);
        }
        for (k, c) in o.negative.occupied() {
            self.negative.add(k, c);
        }
    }

    pub fn count(&self) -> u64 {
        self.zeros + self.positive.total() + self.negative.total()
    }

    /// The value at `rank` (0-based, ascending) within [`RELATIVE_ACCURACY`]; `None` past the
    /// last.
    pub fn value_at_rank(&self, rank: u64) -> Option<f64> {
        let mut seen = 0u64;
        // Most negative first: the negative store's highest magnitudes.
        for (k, c) in self.negative.occupied().rev() {
            seen += c;
            if rank < seen {
                return Some(-bin_value(k));
            }
        }
        seen += self.zeros;
        if rank < seen {
            return Some(0.0);
        }
        for (k, c) in self.positive.occupied() {
            seen += c;
            if rank < seen {
                return Some(bin_value(k));
            }
        }
        None
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_varint(&mut out, self.zeros);
        for bins in [&self.positive, &self.negative] {
            let occupied: Vec<(i32, u64)> = bins.occupied().collect();
            put_varint(&mut out, occupied.len() as u64);
            let mut prev = None;
            for (k, c) in occupied {
                match prev {
                    None => put_varint(&mut out, zigzag(k)),
                    Some(p) => put_varint(&mut out, (k - p) as u64),
                }
                put_varint(&mut out, c);
                prev = Some(k);
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Sketch, String> {
        let mut r = Reader(bytes);
        if r.byte()? != FORMAT {
            return Err("unknown sketch format".into());
        }
        let mut s = Sketch {
            zeros: r.varint()?,
            ..Sketch::default()
        };
        for sign in 0..2 {
            let n = r.varint()?;
            if n > MAX_BINS as u64 {
                return Err(format!("a sketch with {n} bins in one sign"));
            }
            let mut k = 0i64;
            for i in 0..n {
                k = if i == 0 {
                    unzigzag(r.varint()?)
                } else {
                    i64::try_from(r.varint()?)
                        .ok()
                        .and_then(|gap| k.checked_add(gap))
                        .ok_or("bad key gap")?
                };
                let key = i32::try_from(k).map_err(|_| "sketch key out of range")?;
                let bins = if sign == 0 {
                    &mut s.positive
                } else {
                    &mut s.negative
                };
                bins.add(key, r.varint()?);
            }
        }
        if !r.0.is_empty() {
            return Err("trailing bytes after a sketch".into());
        }
        Ok(s)
    }
}

fn zigzag(k: i32) -> u64 {
    ((k << 1) ^ (k >> 31)) as u32 as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let (b, rest) = self.0.split_first().ok_or("a sketch cut short")?;
        self.0 = rest;
        Ok(*b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("a sketch varint too long".into())
    }
}

impl Serialize for Sketch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.encode())
    }
}

impl<'de> Deserialize<'de> for Sketch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sketch, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Sketch;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an encoded quantile sketch (bytes)")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Sketch, E> {
                Sketch::decode(v).map_err(E::custom)
            }
            // JSON has no bytes: an array of numbers.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Sketch, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Sketch::decode(&v).map_err(de::Error::custom)
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic spread of values (no RNG dependency): xorshift.
    fn values(n: usize, seed: u64, f: impl Fn(f64) -> f64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                f((x >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    }

    fn within(est: f64, exact: f64) -> bool {
        (est - exact).abs() <= RELATIVE_ACCURACY * exact.abs() + 1e-300
    }

    fn check_every_rank(s: &Sketch, v: &[f64]) {
        let mut sorted = v.to_vec();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(s.count(), sorted.len() as u64);
        for (rank, exact) in sorted.iter().enumerate() {
            let est = s.value_at_rank(rank as u64).unwrap();
            assert!(within(est, *exact), "rank {rank}: {est} vs {exact}");
        }
        assert_eq!(s.value_at_rank(sorted.len() as u64), None);
    }

    #[test]
    fn every_rank_is_within_the_relative_accuracy_for_any_sign_and_scale() {
        for (seed, f) in [
            (1u64, (|u: f64| 15.0 + 15.0 * u) as fn(f64) -> f64),
            (2, |u| (u * 40.0 - 20.0).exp()),
            (3, |u| (u - 0.5) * 2000.0),
            (4, |u| if u < 0.2 { 0.0 } else { -u * 1e6 }),
        ] {
            let v = values(5000, seed, f);
            let mut s = Sketch::default();
            v.iter().for_each(|x| s.add(*x));
            check_every_rank(&s, &v);
        }
    }

    #[test]
    fn merged_parts_equal_the_sketch_of_the_whole() {
        let v = values(3000, 9, |u| 900.0 + 200.0 * u * u);
        let mut whole = Sketch::default();
        v.iter().for_each(|x| whole.add(*x));
        let mut day = Sketch::default();
        for hour in v.chunks(125).rev() {
            let mut h = Sketch::default();
            hour.iter().for_each(|x| h.add(*x));
            day.merge(&h);
        }
        assert_eq!(day, whole);
        check_every_rank(&day, &v);
    }

    #[test]
    fn encoding_round_trips_and_costs_about_two_bytes_a_bin() {
        let v = values(3600, 5, |u| 18.0 + 8.0 * u);
        let mut s = Sketch::default();
        v.iter().for_each(|x| s.add(*x));
        s.add(0.0);
        s.add(-3.5);
        let bytes = s.encode();
        assert_eq!(Sketch::decode(&bytes).unwrap(), s);
        let bins = s.positive.occupied().count() + s.negative.occupied().count();
        assert!(bins <= 40, "{bins}");
        // 3,600 readings in ~20 bins of ~180: three bytes each at most.
        assert!(bytes.len() <= 4 + 3 * bins, "{} bytes", bytes.len());
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Sketch>(&json).unwrap(), s);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let s = Sketch::of(42.0);
        let bytes = s.encode();
        for cut in 0..bytes.len() {
            assert!(Sketch::decode(&bytes[..cut]).is_err());
        }
        assert!(Sketch::decode(&[9, 0, 0, 0]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(Sketch::decode(&long).is_err());
        assert!(Sketch::decode(&[FORMAT, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }

    #[test]
    fn bins_past_the_limit_fold_the_smallest_magnitudes_and_keep_the_largest_exact() {
        let mut s = Sketch::default();
        // 1e-300 … 1e300: far more than MAX_BINS bins apart.
        let v: Vec<f64> = (-300..=300).map(|e| 10f64.powi(e)).collect();
        v.iter().for_each(|x| s.add(*x));
        assert!(s.positive.counts.len() <= MAX_BINS);
        assert_eq!(s.count(), v.len() as u64);
        let top = s.value_at_rank(v.len() as u64 - 1).unwrap();
        assert!(within(top, 1e300), "{top}");
        // The top 2,048 bins span about 10^18: p99 (1e294) is inside them, p1 (1e-294) not.
        let p99 = s.value_at_rank((v.len() as u64 - 1) * 99 / 100).unwrap();
        assert!(within(p99, v[(v.len() - 1) * 99 / 100]), "{p99}");
        let p1 = s.value_at_rank((v.len() as u64 - 1) / 100).unwrap();
        assert!(!within(p1, v[(v.len() - 1) / 100]), "{p1}");
        s.add(f64::NAN);
        assert_eq!(s.count(), v.len() as u64);
    }
}
