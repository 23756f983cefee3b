#!/usr/bin/env python3
"""A WebSocket-over-HTTP/2 echo backend (RFC 8441) for the L7 tests, on two real implementations:
python-hyper's h2 (the HTTP/2 server, extended CONNECT offered in its SETTINGS) and wsproto (the
WebSocket frames). h2c on 127.0.0.1; prints the port, then serves until killed. A CONNECT for
:protocol websocket on /ws is answered 200 and every text message echoed; anything else 404."""
import socket
import sys
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage


def serve(sock):
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    conn.local_settings = h2.settings.Settings(
        client=False, initial_values={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    streams = {}
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                h = {k.decode(): v.decode() for k, v in ev.headers}
                if h.get(":method") == "CONNECT" and h.get(":protocol") == "websocket" and h.get(":path") == "/ws":
                    conn.send_headers(ev.stream_id, [(":status", "200")])
                    streams[ev.stream_id] = Connection(ConnectionType.SERVER)
                else:
                    conn.send_headers(ev.stream_id, [(":status", "404"), ("content-length", "0")], end_stream=True)
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                ws = streams.get(ev.stream_id)
                if ws is None or not ev.data:
                    continue
                ws.receive_data(ev.data)
                for wev in ws.events():
                    if isinstance(wev, TextMessage):
                        conn.send_data(ev.stream_id, ws.send(TextMessage(data=wev.data)))
                    elif isinstance(wev, Ping):
                        conn.send_data(ev.stream_id, ws.send(wev.response()))
                    elif isinstance(wev, CloseConnection):
                        conn.send_data(ev.stream_id, ws.send(wev.response()), end_stream=True)
                        del streams[ev.stream_id]
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                streams.pop(ev.stream_id, None)
        sock.sendall(conn.data_to_send())


def main():
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(16)
    print(ln.getsockname()[1], flush=True)
    while True:
        sock, _ = ln.accept()
        threading.Thread(target=serve_quietly, args=(sock,), daemon=True).start()


def serve_quietly(sock):
    try:
        serve(sock)
    except (OSError, h2.exceptions.ProtocolError):
        pass  # the proxy closed or reset the connection: this one is done
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
