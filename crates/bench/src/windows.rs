//! Batching windows as Lambda's event-source mappings form them: a window opens when the
//! first record arrives, closes a window's length later (or as soon as the batch is full),
//! and the next one opens at the next record to arrive. So windows follow the traffic, not
//! the clock, and almost never line up with a slot or an hour: a window usually holds the
//! end of one slot and the start of the next.

use std::ops::Range;

/// One batch: the records it holds (indices into the arrivals) and when it was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub records: Range<usize>,
    /// When the window closed (the last arrival it holds, if the batch filled first), ms.
    pub closed_ms: i64,
}

/// Cuts `arrivals` (epoch ms, ascending) into batches of at most `batch_size` records whose
/// windows last `window_ms` from their first record.
pub fn batches(arrivals: &[i64], window_ms: i64, batch_size: usize) -> Vec<Batch> {
    let batch_size = batch_size.max(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i < arrivals.len() {
        let close = arrivals[i] + window_ms.max(0);
        let mut end = i;
        while end < arrivals.len()
            && end - i < batch_size
            && arrivals[end] < close.max(arrivals[i] + 1)
        {
            end += 1;
        }
        let closed_ms = if end - i == batch_size {
            arrivals[end - 1]
        } else {
            close
        };
        out.push(Batch {
            records: i..end,
            closed_ms,
        });
        i = end;
    }
    out
}

/// Groups batches of one mapping (by when they were delivered, `closed_ms`, which is when
/// their writes reach the table's stream) into the windows of a second mapping reading that
/// stream: each group's window opens at its first delivery and lasts `window_ms`.
pub fn downstream(batches: &[Batch], window_ms: i64) -> Vec<Range<usize>> {
    let closes: Vec<i64> = batches.iter().map(|b| b.closed_ms).collect();
    self::batches(&closes, window_ms, usize::MAX)
        .into_iter()
        .map(|b| b.records)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_opens_at_its_first_record_not_at_a_round_time() {
        // A record a minute from 00:01:37: the 300 s windows open at 97 s, 397 s, ...
        let arrivals: Vec<i64> = (0..12).map(|k| 97_000 + 60_000 * k).collect();
        let b = batches(&arrivals, 300_000, 10_000);
        assert_eq!(b.len(), 3);
        assert_eq!(b[0].records, 0..5);
        assert_eq!(b[0].closed_ms, 397_000);
        assert_eq!(b[1].records, 5..10);
        assert_eq!(b[2].records, 10..12);
        assert_eq!(b[2].closed_ms, 697_000 + 300_000);
    }

    #[test]
    fn a_full_batch_is_delivered_at_once_and_the_next_window_opens_at_the_next_record() {
        let arrivals: Vec<i64> = (0..10).collect();
        let b = batches(&arrivals, 1_000, 4);
        assert_eq!(
            b,
            vec![
                Batch {
                    records: 0..4,
                    closed_ms: 3
                },
                Batch {
                    records: 4..8,
                    closed_ms: 7
                },
                Batch {
                    records: 8..10,
                    closed_ms: 1_008
                },
            ]
        );
    }

    #[test]
    fn a_quiet_gap_leaves_no_empty_window_and_restarts_the_clock() {
        let b = batches(&[0, 10, 5_000, 5_001], 1_000, 100);
        assert_eq!(
            b.iter().map(|b| b.records.clone()).collect::<Vec<_>>(),
            vec![0..2, 2..4]
        );
        assert_eq!(b[1].closed_ms, 6_000);
    }

    #[test]
    fn a_zero_window_still_takes_every_record_once() {
        let arrivals = [5, 5, 6, 9];
        let b = batches(&arrivals, 0, 100);
        let covered: Vec<usize> = b.iter().flat_map(|b| b.records.clone()).collect();
        assert_eq!(covered, vec![0, 1, 2, 3]);
    }

    #[test]
    fn the_stream_reader_gathers_the_deliveries_of_its_own_window() {
        let ingest = batches(&(0..20).map(|k| 1_000 * k).collect::<Vec<_>>(), 2_000, 100);
        // Ingest delivers at 2 s, 4 s, ... 20 s; a 5 s window from 2 s holds 2, 4 and 6.
        let groups = downstream(&ingest, 5_000);
        assert_eq!(groups[0], 0..3);
        let covered: usize = groups.iter().map(|g| g.len()).sum();
        assert_eq!(covered, ingest.len());
    }
}
