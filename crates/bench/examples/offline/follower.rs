//! Following a table's DynamoDB stream after every batch, as cheaply as DynamoDB Local
//! allows (the runs read the stream thousands of times).

use std::collections::BTreeMap;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::EventRecord;
use tidemark_bench::BenchError;
use tidemark_bench::run::Target;
use tidemark_streams::{DynamoDbStreamSource, EventSource, Start};

/// A table's stream read to its end again and again, as cheaply as DynamoDB Local allows: each
/// shard's iterator is kept between reads (one `GetRecords` per open shard when nothing is
/// left), and the shards are listed again only when one has been read to its end.
/// (`tidemark_bench::stream::StreamReader` asks for a new iterator on every shard at every
/// read: the same records, four calls instead of one, and these runs read the stream after
/// every batch.)
pub struct Follower {
    source: DynamoDbStreamSource,
    /// Shards being read and their next iterator.
    open: Vec<(String, String)>,
    /// Shards seen (read to their end or being read).
    seen: std::collections::HashSet<String>,
    /// The last record read from each shard.
    last: BTreeMap<String, String>,
}

fn stream_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Stream(e.to_string())
}

impl Follower {
    pub async fn for_table(target: &Target, table: &str) -> Result<Follower, BenchError> {
        let direct = target.client().await;
        let source = DynamoDbStreamSource::for_table(&direct, target.streams().await, table)
            .await
            .map_err(stream_err)?;
        let mut f = Follower {
            source,
            open: Vec::new(),
            seen: Default::default(),
            last: BTreeMap::new(),
        };
        f.list().await?;
        Ok(f)
    }

    /// Starts reading every shard not seen yet from its beginning (parents come first in the
    /// listing, so a child is read after its parent's records).
    async fn list(&mut self) -> Result<(), BenchError> {
        for shard in self.source.shards().await.map_err(stream_err)? {
            if !self.seen.insert(shard.id.clone()) {
                continue;
            }
            if let Some(it) = self
                .source
                .iterator(&shard.id, &Start::TrimHorizon)
                .await
                .map_err(stream_err)?
            {
                self.open.push((shard.id, it));
            }
        }
        Ok(())
    }

    pub async fn drain(&mut self) -> Result<Vec<EventRecord>, BenchError> {
        let max = self.source.max_read();
        let mut out = Vec::new();
        loop {
            let mut ended = false;
            let mut still_open = Vec::with_capacity(self.open.len());
            for (shard, mut it) in std::mem::take(&mut self.open) {
                let mut attempts = 0;
                loop {
                    let page = match self.source.read(&shard, &it, max).await {
                        Ok(p) => p,
                        // DynamoDB Local refuses an iterator taken while its shard was still
                        // empty, and iterators expire: a new one where this one was.
                        Err(e) if attempts < 5 => {
                            attempts += 1;
                            let start = match self.last.get(&shard) {
                                Some(seq) => Start::After(seq.clone()),
                                None => Start::TrimHorizon,
                            };
                            tokio::time::sleep(Duration::from_millis(20 * attempts)).await;
                            match self.source.iterator(&shard, &start).await {
                                Ok(Some(fresh)) => {
                                    it = fresh;
                                    continue;
                                }
                                Ok(None) => {
                                    ended = true;
                                    break;
                                }
                                Err(_) => return Err(stream_err(e)),
                            }
                        }
                        Err(e) => return Err(stream_err(e)),
                    };
                    let full = page.records.len() >= max;
                    if let Some(r) = page.records.last() {
                        self.last
                            .insert(shard.clone(), DynamoDbStreamSource::sequence(r).to_owned());
                    }
                    out.extend(page.records);
                    match page.next {
                        Some(next) => it = next,
                        None => {
                            ended = true;
                            break;
                        }
                    }
                    if !full {
                        still_open.push((shard.clone(), it.clone()));
                        break;
                    }
                }
            }
            self.open = still_open;
            if !ended {
                return Ok(out);
            }
            // A shard closed: its children hold what came after.
            self.list().await?;
        }
    }
}
