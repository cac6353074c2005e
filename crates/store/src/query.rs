//! The one paging loop over a Query: every page of a request, until the visitor says stop,
//! counting the read units DynamoDB reports (ask for them on the request).

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;

use crate::{Item, StoreError};

/// Sends `req` page after page, handing each item to `visit` until it returns `false`;
/// returns the capacity units the pages consumed (0 unless the request asks for them).
pub async fn each(
    req: QueryFluentBuilder,
    mut visit: impl FnMut(Item) -> bool,
) -> Result<f64, StoreError> {
    let mut start: Option<Item> = None;
    let mut units = 0.0;
    loop {
        let resp = req
            .clone()
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(StoreError::sdk("Query"))?;
        units += resp
            .consumed_capacity()
            .and_then(|c| c.capacity_units())
            .unwrap_or(0.0);
        for i in resp.items.unwrap_or_default() {
            if !visit(i) {
                return Ok(units);
            }
        }
        match resp.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(units),
        }
    }
}
