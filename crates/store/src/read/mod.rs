//! Reading stored items back: one partition's Query as data ([`spec`]), several partitions
//! merged into one ordered list ([`merge`]), packed slots read back as the reading items
//! they stand for ([`packed`]), and a device's readings over its layout history
//! ([`readings`]): the one reader of stored readings, whether the API pages them for a
//! client or the aggregator and `tidemark-admin` walk them.

pub mod interleave;
pub mod packed;
pub mod readings;
pub mod spec;

pub use interleave::{Interleave, InterleavedPage, PagedPartition, interleaved_page};
pub use packed::Packed;
pub use readings::{Walked, walk_readings, walk_readings_while, walk_whole_readings_while};
pub use spec::{BadPosition, Page, Place, Queries, QuerySpec, QueryStore, SkRange, query_all};
