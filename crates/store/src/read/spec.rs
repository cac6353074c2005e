//! One partition's Query, described as data ([`QuerySpec`]) so that every reader (the
//! API's paged lists, the aggregator's walks, `tidemark-admin rebuild`) pages it the same
//! way, against DynamoDB ([`Queries`]) or an in-memory table in tests.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::{GSI1, GSI2, attr};

use crate::{Item, StoreError};

/// A sort-key condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkRange {
    /// Inclusive on both ends.
    Between(String, String),
    BeginsWith(String),
    /// The whole partition.
    All,
}

/// Where a sort key lies against a query's key condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Before,
    Inside,
    After,
}

/// One partition of the table or of GSI1, read in sort-key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuerySpec {
    /// `None` for the table, `Some(GSI1)` for the index.
    pub index: Option<&'static str>,
    /// The value of `pk` (table) or `gsi1pk` (index).
    pub partition: String,
    pub range: SkRange,
    pub forward: bool,
    pub consistent: bool,
    /// Keep only items whose string attribute equals the value. Applied by DynamoDB after
    /// the key condition and the limit, so a page may come back short; used only where the
    /// filter drops a minority (see the alerts route).
    pub filter_eq: Option<(&'static str, String)>,
}

impl QuerySpec {
    pub fn table(partition: String, range: SkRange, forward: bool) -> Self {
        QuerySpec {
            index: None,
            partition,
            range,
            forward,
            consistent: false,
            filter_eq: None,
        }
    }

    pub fn gsi1(partition: String, range: SkRange, forward: bool) -> Self {
        QuerySpec {
            index: Some(GSI1),
            ..Self::table(partition, range, forward)
        }
    }

    /// A GSI2 (connectivity) partition: keys only, the items read after.
    pub fn gsi2(partition: String, range: SkRange, forward: bool) -> Self {
        QuerySpec {
            index: Some(GSI2),
            ..Self::table(partition, range, forward)
        }
    }

    pub fn partition_attr(&self) -> &'static str {
        match self.index {
            Some(GSI1) => attr::GSI1PK,
            Some(_) => attr::GSI2PK,
            None => attr::PK,
        }
    }

    pub fn sort_attr(&self) -> &'static str {
        match self.index {
            Some(GSI1) => attr::GSI1SK,
            Some(_) => attr::GSI2SK,
            None => attr::SK,
        }
    }

    /// The attributes (besides the partition attribute) that identify a position: the sort
    /// key, and for an index also the table key (index sort keys need not be unique).
    pub fn position_attrs(&self) -> &'static [&'static str] {
        match self.index {
            Some(GSI1) => &[attr::GSI1SK, attr::PK, attr::SK],
            Some(_) => &[attr::GSI2SK, attr::PK, attr::SK],
            None => &[attr::SK],
        }
    }

    /// Where a sort key (the first position attribute) lies against this query's range.
    pub fn place_of(&self, sort_key: &str) -> Place {
        match &self.range {
            SkRange::Between(lo, _) if sort_key < lo.as_str() => Place::Before,
            SkRange::Between(_, hi) if sort_key > hi.as_str() => Place::After,
            SkRange::BeginsWith(prefix) if !sort_key.starts_with(prefix.as_str()) => {
                if sort_key < prefix.as_str() {
                    Place::Before
                } else {
                    Place::After
                }
            }
            _ => Place::Inside,
        }
    }

    /// The position of an item of this partition, or `None` if it lacks a key attribute.
    pub fn position_of(&self, item: &Item) -> Option<Vec<String>> {
        self.position_attrs()
            .iter()
            .map(|a| item.get(*a).and_then(|v| v.as_s().ok()).cloned())
            .collect()
    }

    /// The `ExclusiveStartKey` resuming after `position`.
    pub fn start_key(&self, position: &[String]) -> Option<Item> {
        let attrs = self.position_attrs();
        if position.len() != attrs.len() {
            return None;
        }
        let mut k: Item = attrs
            .iter()
            .zip(position)
            .map(|(a, v)| (a.to_string(), AttributeValue::S(v.clone())))
            .collect();
        k.insert(
            self.partition_attr().to_owned(),
            AttributeValue::S(self.partition.clone()),
        );
        Some(k)
    }

    /// Whether `sk` (a sort-key value) satisfies the range.
    pub fn in_range(&self, sk: &str) -> bool {
        match &self.range {
            SkRange::Between(lo, hi) => lo.as_str() <= sk && sk <= hi.as_str(),
            SkRange::BeginsWith(p) => sk.starts_with(p.as_str()),
            SkRange::All => true,
        }
    }
}

/// One page of a Query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub items: Vec<Item>,
    /// `LastEvaluatedKey`: more may follow after it.
    pub last_key: Option<Item>,
}

/// One page of one partition's Query: at most `limit` items, after `start`
/// (an `ExclusiveStartKey`).
pub trait QueryStore {
    fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send;
}

/// Every item of `spec`'s range, page after page of at most `page` items, to `visit`: the
/// one loop that follows `LastEvaluatedKey` to the end of a partition.
pub async fn query_all<S: QueryStore + Sync>(
    store: &S,
    spec: &QuerySpec,
    page: i32,
    mut visit: impl FnMut(Item),
) -> Result<usize, StoreError> {
    let mut start = None;
    let mut n = 0;
    loop {
        let p = store.query(spec, start, page).await?;
        n += p.items.len();
        p.items.into_iter().for_each(&mut visit);
        match p.last_key {
            Some(k) => start = Some(k),
            None => return Ok(n),
        }
    }
}

/// Why a resume position cannot be used (a tampered or foreign cursor).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a resume position does not fit its partition")]
pub struct BadPosition;

impl QuerySpec {
    /// Where a partition resumes: `Some(after)` (`None` inside: from the start of its
    /// range), or `None` when it has nothing left in the walk's direction. A position the
    /// range has moved past (the retention edge overtook a cursor kept too long) is not a
    /// valid ExclusiveStartKey: DynamoDB would refuse it. The items between it and the edge
    /// have expired, so the walk goes on from the edge, or the partition is done if the
    /// walk was heading away from it.
    #[allow(clippy::type_complexity)]
    pub fn resume(
        &self,
        after: Option<Vec<String>>,
    ) -> Result<Option<Option<Vec<String>>>, BadPosition> {
        if after
            .as_ref()
            .is_some_and(|a| a.len() != self.position_attrs().len())
        {
            return Err(BadPosition);
        }
        Ok(match after.as_ref().map(|a| self.place_of(&a[0])) {
            Some(Place::Inside) | None => Some(after),
            Some(Place::Before) if self.forward => Some(None),
            Some(Place::After) if !self.forward => Some(None),
            Some(_) => None,
        })
    }
}

/// Queries of one table in DynamoDB.
#[derive(Debug, Clone)]
pub struct Queries {
    client: Client,
    table: String,
}

impl Queries {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Queries {
            client,
            table: table.into(),
        }
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

impl QueryStore for Queries {
    async fn query(
        &self,
        spec: &QuerySpec,
        start: Option<Item>,
        limit: i32,
    ) -> Result<Page, StoreError> {
        let mut names = HashMap::from([
            ("#p".to_owned(), spec.partition_attr().to_owned()),
            ("#s".to_owned(), spec.sort_attr().to_owned()),
        ]);
        let mut values = HashMap::from([(":p".to_owned(), s(spec.partition.clone()))]);
        let cond = match &spec.range {
            SkRange::Between(lo, hi) => {
                values.insert(":lo".into(), s(lo.clone()));
                values.insert(":hi".into(), s(hi.clone()));
                "#p = :p AND #s BETWEEN :lo AND :hi"
            }
            SkRange::BeginsWith(prefix) => {
                values.insert(":pre".into(), s(prefix.clone()));
                "#p = :p AND begins_with(#s, :pre)"
            }
            SkRange::All => {
                names.remove("#s");
                "#p = :p"
            }
        };
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(spec.index.map(str::to_owned))
            .key_condition_expression(cond)
            .scan_index_forward(spec.forward)
            .consistent_read(spec.consistent)
            .limit(limit.max(1))
            .set_exclusive_start_key(start);
        if let Some((a, v)) = &spec.filter_eq {
            names.insert("#f".into(), (*a).to_owned());
            values.insert(":f".into(), s(v.clone()));
            req = req.filter_expression("#f = :f");
        }
        let out = req
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await
            .map_err(StoreError::sdk("Query"))?;
        Ok(Page {
            items: out.items.unwrap_or_default(),
            last_key: out.last_evaluated_key.filter(|k| !k.is_empty()),
        })
    }
}
