"""Writes events/kinesis-kpl.json: a Kinesis event whose records were aggregated by
aws-kinesis-agg, AWS's own implementation of the KPL aggregation format, so ingest's
de-aggregation is tested against what real producers send, not against our own encoder.

    scripts/kpl-fixtures.sh            regenerate the file
    scripts/kpl-fixtures.sh --check    fail if the committed file is not what it generates

Records (2026-04-20, the fixtures' day; crates/ingest/tests/it/local/kpl_local.rs reads them):
  0  an aggregate of five user records: kpl_a at 14:00:00 (temperature), kpl_b at 14:00:00
     with its own explicit hash key, a user record that is not JSON, an array of two kpl_a
     readings (14:00:10, 14:00:20), and kpl_a at 14:00:00 again with humidity (same
     timestamp: one reading with both metrics)
  1  a plain JSON reading of sensor_01, between aggregates
  2  an aggregate whose MD5 trailer was altered in transit
  3  an aggregate truncated in the middle
"""
import base64
import json
import os
import sys

from aws_kinesis_agg.aggregator import RecordAggregator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "events", "kinesis-kpl.json")
ARRIVAL = 1776693605.125  # 2026-04-20T14:00:05.125Z
SEQ = "49590338271490256608559692538361571095921575989136590{:03d}"


def reading(device, at, **metrics):
    return json.dumps({"deviceId": device, "timestamp": at, **metrics}, separators=(",", ":"))


def aggregate(user_records):
    agg = RecordAggregator()
    for pk, data, ehk in user_records:
        full = agg.add_user_record(pk, data.encode() if isinstance(data, str) else data, ehk)
        assert full is None, "the fixture fits one aggregate"
    pk, _ehk, data = agg.clear_and_get().get_contents()
    return pk, data


def record(i, pk, data):
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": pk,
            "sequenceNumber": SEQ.format(i),
            "data": base64.b64encode(data).decode(),
            "approximateArrivalTimestamp": ARRIVAL + i / 1000,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": "shardId-000000000000:" + SEQ.format(i),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/tidemark-ingest",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/tidemark-readings",
    }


def event():
    good = aggregate([
        ("kpl_a", reading("kpl_a", "2026-04-20T14:00:00Z", temperature=20.5), None),
        ("kpl_b", reading("kpl_b", "2026-04-20T14:00:00Z", temperature=21.0),
         "170141183460469231731687303715884105728"),
        ("kpl_a", b"not json {", None),
        ("kpl_a", "[" + reading("kpl_a", "2026-04-20T14:00:10Z", temperature=20.6) + ","
         + reading("kpl_a", "2026-04-20T14:00:20Z", temperature=20.7) + "]", None),
        ("kpl_a", reading("kpl_a", "2026-04-20T14:00:00Z", humidity=40), None),
    ])
    plain = reading("sensor_01", "2026-04-20T14:00:00Z", temperature=22.4).encode()
    pk, damaged = aggregate([
        ("kpl_c", reading("kpl_c", "2026-04-20T14:00:00Z", temperature=19.0), None),
        ("kpl_c", reading("kpl_c", "2026-04-20T14:00:01Z", temperature=19.1), None),
    ])
    altered = damaged[:-1] + bytes([damaged[-1] ^ 0xFF])
    truncated = damaged[: len(damaged) // 2]
    return {"Records": [
        record(0, good[0], good[1]),
        record(1, "sensor_01", plain),
        record(2, pk, altered),
        record(3, pk, truncated),
    ]}


def main():
    text = json.dumps(event(), indent=2) + "\n"
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit(f"{OUT} is not what scripts/kpl_fixtures.py generates; run scripts/kpl-fixtures.sh")
        print("kpl-fixtures: events/kinesis-kpl.json is what aws-kinesis-agg generates", file=sys.stderr)
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"kpl-fixtures: wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
