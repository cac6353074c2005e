#!/usr/bin/env python3
"""Forwards TCP connections from <address>:<port> to 127.0.0.1:<port>, for each port given,
until killed. scripts/sam-local.sh runs it on the Docker bridge's gateway so that its
containers reach DynamoDB Local and moto's S3, which listen on 127.0.0.1 only
(scripts/services.sh): the local stack's one listener beyond loopback, and only while
sam-local runs.

    forward.py <address> <port>...

Prints one line per port once it listens. A port something already answers on at <address>
(a service started to listen on every interface) is left alone and said so.
"""
import asyncio
import errno
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


def handler(port):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    return handle


async def main(address, ports):
    servers = []
    for port in ports:
        try:
            servers.append(await asyncio.start_server(handler(port), address, port))
            print(f"forwarding {address}:{port} to 127.0.0.1:{port}", flush=True)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            print(f"{address}:{port} is taken (a service on every interface?); not forwarded", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: forward.py <address> <port>...")
    try:
        asyncio.run(main(sys.argv[1], [int(p) for p in sys.argv[2:]]))
    except KeyboardInterrupt:
        pass
