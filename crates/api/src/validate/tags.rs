//! Device tags in requests: the `tags` and `tagsEffectiveFrom` of `PUT /devices/{id}` (with
//! `location.site`, the tag `site`), and the `tag` filters of listings.

use std::collections::BTreeMap;

use serde_json::Value;
use tidemark_schema::{Tag, TagKey, TagValue, Tags, Timestamp};

use crate::error::ApiError;
use crate::request::Params;

/// A listing takes at most this many `tag` filters (a device has at most as many tags).
pub const MAX_TAG_FILTERS: usize = Tags::MAX;

/// What a `PUT /devices/{id}` asks of the device's tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagRequest {
    /// `tags` as given (with `site` from `location.site` when it has none); `None`: omitted,
    /// the tags stay as they are (but for [`TagRequest::site`]).
    pub tags: Option<Tags>,
    /// `location.site`, when it is a tag value and `tags` was omitted: the tag `site` set
    /// over the current tags.
    pub site: Option<TagValue>,
    /// `tagsEffectiveFrom` (default: the earliest moment every function can honour).
    pub effective_from: Option<Timestamp>,
}

impl TagRequest {
    /// Whether the request changes anything about the tags.
    pub fn changes(&self) -> bool {
        self.tags.is_some() || self.site.is_some()
    }

    /// The tags to declare, given those declared now.
    pub fn applied_to(&self, current: &Tags) -> Result<Tags, ApiError> {
        if let Some(t) = &self.tags {
            return Ok(t.clone());
        }
        let mut map = current.as_map().clone();
        if let Some(site) = &self.site {
            map.insert(site_key(), site.clone());
        }
        Tags::new(map).map_err(|e| ApiError::bad("location.site", e.to_string()))
    }
}

fn site_key() -> TagKey {
    // A constant that is a valid key.
    TagKey::new(TagKey::SITE).unwrap_or_else(|_| unreachable!())
}

/// `tags` (a JSON object of at most 16 `key: value` strings), `tagsEffectiveFrom` and the
/// `location.site` alias, as one request.
pub fn tag_request(
    tags: Option<Value>,
    effective_from: Option<Value>,
    location_site: Option<&str>,
) -> Result<TagRequest, ApiError> {
    // A site that is not a tag value (a space, say) stays a location label and makes no
    // tag: clients that registered such sites before tags existed keep working.
    let site = location_site.and_then(|s| TagValue::new(s).ok());
    let tags = tags.map(parse_tags).transpose()?;
    let tags = match (tags, &site) {
        (Some(t), Some(site)) => {
            let key = site_key();
            match t.get(&key) {
                Some(v) if v != site => {
                    return Err(ApiError::bad(
                        "tags.site",
                        format!(
                            "{v:?} differs from location.site ({site:?}), which is also the \
                             tag site; give one of them, or the same value"
                        ),
                    ));
                }
                Some(_) => Some(t),
                None => {
                    let mut map = t.as_map().clone();
                    map.insert(key, site.clone());
                    Some(Tags::new(map).map_err(|e| ApiError::bad("tags", e.to_string()))?)
                }
            }
        }
        (t, _) => t,
    };
    let site = if tags.is_some() { None } else { site };
    let effective_from = effective_from.map(parse_time).transpose()?;
    if effective_from.is_some() && tags.is_none() && site.is_none() {
        return Err(ApiError::bad(
            "tagsEffectiveFrom",
            "given without tags (or location.site) to change",
        ));
    }
    Ok(TagRequest {
        tags,
        site,
        effective_from,
    })
}

fn parse_tags(v: Value) -> Result<Tags, ApiError> {
    let Value::Object(m) = v else {
        return Err(ApiError::bad(
            "tags",
            format!(
                "must be an object of at most {} \"key\": \"value\" tags",
                Tags::MAX
            ),
        ));
    };
    if m.len() > Tags::MAX {
        return Err(ApiError::bad(
            "tags",
            format!("a device has at most {} tags; got {}", Tags::MAX, m.len()),
        ));
    }
    let mut map = BTreeMap::new();
    for (k, v) in m {
        let field = format!("tags.{k}");
        let key = TagKey::new(&k).map_err(|e| ApiError::bad(field.clone(), e.to_string()))?;
        let Value::String(v) = v else {
            return Err(ApiError::bad(field, "a tag value is a string"));
        };
        let value = TagValue::new(&v).map_err(|e| ApiError::bad(field, e.to_string()))?;
        map.insert(key, value);
    }
    Tags::new(map).map_err(|e| ApiError::bad("tags", e.to_string()))
}

fn parse_time(v: Value) -> Result<Timestamp, ApiError> {
    super::body_time("tagsEffectiveFrom", &v)
}

/// The `tag` filters of a listing: each `key:value`, at most [`MAX_TAG_FILTERS`], each once
/// (repeats dropped), in the order given.
pub fn tag_filters(p: &Params) -> Result<Vec<Tag>, ApiError> {
    let raw = p.all("tag");
    if raw.len() > MAX_TAG_FILTERS {
        return Err(ApiError::bad(
            "tag",
            format!(
                "at most {MAX_TAG_FILTERS} tag filters (a device has at most {} tags); got {}",
                Tags::MAX,
                raw.len()
            ),
        ));
    }
    let mut out: Vec<Tag> = Vec::with_capacity(raw.len());
    for r in raw {
        let tag = Tag::parse(r).map_err(|e| {
            ApiError::bad(
                "tag",
                format!("{e} (a tag filter is key:value, e.g. site:A)"),
            )
        })?;
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn param(e: ApiError) -> String {
        match e {
            ApiError::BadRequest { param, .. } => param,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn tags_are_an_object_of_at_most_sixteen_well_formed_pairs() {
        let r = tag_request(Some(json!({"site": "A", "line": "3"})), None, None).unwrap();
        assert_eq!(r.tags.as_ref().map(Tags::len), Some(2));
        assert_eq!(r.site, None);
        let cases = [
            (json!(["site:A"]), "tags"),
            (json!({"Site": "A"}), "tags.Site"),
            (json!({"site": 3}), "tags.site"),
            (json!({"site": "A B"}), "tags.site"),
            (json!({"site": ""}), "tags.site"),
        ];
        for (v, want) in cases {
            assert_eq!(param(tag_request(Some(v), None, None).unwrap_err()), want);
        }
        let seventeen: serde_json::Map<String, Value> =
            (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert_eq!(
            param(tag_request(Some(Value::Object(seventeen)), None, None).unwrap_err()),
            "tags"
        );
    }

    #[test]
    fn location_site_is_the_tag_site_unless_tags_say_otherwise() {
        let r = tag_request(Some(json!({"line": "3"})), None, Some("A")).unwrap();
        assert!(r.tags.unwrap().has(&Tag::parse("site:A").unwrap()));
        let r = tag_request(Some(json!({"site": "A"})), None, Some("A")).unwrap();
        assert_eq!(r.tags.map(|t| t.len()), Some(1));
        let conflict = tag_request(Some(json!({"site": "B"})), None, Some("A")).unwrap_err();
        assert_eq!(param(conflict), "tags.site");
        let omitted = tag_request(None, None, Some("A")).unwrap();
        assert!(omitted.tags.is_none() && omitted.changes());
        assert_eq!(omitted.site.as_ref().map(TagValue::as_str), Some("A"));
        let label = tag_request(None, None, Some("Plant 3")).unwrap();
        assert!(!label.changes(), "a site that is no tag value makes no tag");
        let sixteen: serde_json::Map<String, Value> =
            (0..16).map(|i| (format!("k{i}"), json!("v"))).collect();
        let full = tag_request(Some(Value::Object(sixteen)), None, Some("A")).unwrap_err();
        assert_eq!(param(full), "tags");
    }

    #[test]
    fn tags_effective_from_is_a_time_and_needs_a_change() {
        let r = tag_request(Some(json!({})), Some(json!("2026-04-20T10:00:00Z")), None).unwrap();
        assert_eq!(
            r.effective_from,
            Some(Timestamp::parse_rfc3339("2026-04-20T10:00:00Z").unwrap())
        );
        let ms = tag_request(Some(json!({})), Some(json!(1_776_679_200_000i64)), None).unwrap();
        assert_eq!(ms.effective_from, r.effective_from);
        for (tags, from) in [
            (Some(json!({})), json!("yesterday")),
            (None, json!("2026-04-20T10:00:00Z")),
        ] {
            let e = tag_request(tags, Some(from), None).unwrap_err();
            assert_eq!(param(e), "tagsEffectiveFrom");
        }
    }

    #[test]
    fn tag_filters_are_key_value_at_most_sixteen() {
        let p = |v: Vec<&str>| {
            Params::new(
                v.into_iter()
                    .map(|t| ("tag".to_owned(), t.to_owned()))
                    .collect(),
                &["tag"],
            )
            .unwrap()
        };
        let f = tag_filters(&p(vec!["site:A", "line:3", "site:A"])).unwrap();
        assert_eq!(f.len(), 2);
        for bad in [vec!["site"], vec!["Site:A"], vec!["site:A B"]] {
            assert_eq!(param(tag_filters(&p(bad)).unwrap_err()), "tag");
        }
        let many: Vec<String> = (0..17).map(|i| format!("k{i}:v")).collect();
        let many = p(many.iter().map(String::as_str).collect());
        assert_eq!(param(tag_filters(&many).unwrap_err()), "tag");
    }
}
