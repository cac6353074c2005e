//! The Kinesis emulator answers the Rust SDK: put a record, read it back.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ShardIteratorType;
use tidemark_testkit::TestStream;

#[tokio::test]
async fn a_record_put_on_a_stream_is_read_back() {
    let s = TestStream::new("store-kinesis", 2).await;
    let put = s
        .client
        .put_record()
        .stream_name(&s.name)
        .partition_key("sensor_01")
        .data(Blob::new(br#"{"deviceId":"sensor_01"}"#.to_vec()))
        .send()
        .await
        .unwrap();
    let it = s
        .client
        .get_shard_iterator()
        .stream_name(&s.name)
        .shard_id(put.shard_id())
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap();
    let recs = s
        .client
        .get_records()
        .shard_iterator(it.shard_iterator().unwrap())
        .send()
        .await
        .unwrap();
    let r = &recs.records()[0];
    assert_eq!(r.sequence_number(), put.sequence_number());
    assert_eq!(r.data().as_ref(), br#"{"deviceId":"sensor_01"}"#);
    assert_eq!(r.partition_key(), Some("sensor_01"));
}
