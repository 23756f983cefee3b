#!/usr/bin/env python3
"""A WebSocket-over-HTTP/2 client (RFC 8441) for the L7 tests, on two real implementations:
python-hyper's h2 (the HTTP/2 connection, extended CONNECT) and wsproto (the WebSocket frames).
Usage: ws_h2_client.py HOST:PORT [tls] PATH MESSAGE...; prints one JSON object."""
import json
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events
import h2.settings
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, TextMessage


def main():
    addr, args = sys.argv[1], sys.argv[2:]
    use_tls = args and args[0] == "tls"
    if use_tls:
        args = args[1:]
    path, messages = args[0], args[1:]
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    if use_tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock, server_hostname="proxy.test")
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    out = {"connect_protocol": False, "status": None, "echoes": [], "closed": None}
    ws = Connection(ConnectionType.CLIENT)
    sid, pending = None, list(messages)

    def events():
        data = sock.recv(65536)
        if not data:
            raise EOFError("the proxy closed the connection")
        evs = conn.receive_data(data)
        sock.sendall(conn.data_to_send())
        return evs

    while out["closed"] is None:
        for ev in events():
            if isinstance(ev, h2.events.RemoteSettingsChanged) and sid is None:
                s = ev.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                out["connect_protocol"] = bool(s and s.new_value == 1)
                if not out["connect_protocol"]:
                    print(json.dumps(out))
                    return
                sid = conn.get_next_available_stream_id()
                conn.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"),
                                        (":scheme", "https" if use_tls else "http"), (":path", path),
                                        (":authority", addr), ("sec-websocket-version", "13"),
                                        ("origin", "http://" + addr)])
                sock.sendall(conn.data_to_send())
            elif isinstance(ev, h2.events.ResponseReceived):
                out["status"] = dict(ev.headers).get(b":status", b"").decode()
                if out["status"] != "200":
                    print(json.dumps(out))
                    return
                conn.send_data(sid, ws.send(TextMessage(data=pending.pop(0))))
                sock.sendall(conn.data_to_send())
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if not ev.data or out["closed"] is not None:
                    continue  # the empty DATA that ends the stream, after the close
                ws.receive_data(ev.data)
                for wev in ws.events():
                    if isinstance(wev, TextMessage):
                        out["echoes"].append(wev.data)
                        if pending:  # ping-pong: the next message only after the echo
                            conn.send_data(sid, ws.send(TextMessage(data=pending.pop(0))))
                        else:
                            conn.send_data(sid, ws.send(CloseConnection(code=1000)))
                    elif isinstance(wev, CloseConnection):
                        out["closed"] = wev.code
                sock.sendall(conn.data_to_send())
            elif isinstance(ev, (h2.events.StreamReset, h2.events.StreamEnded)):
                out["closed"] = out["closed"] or type(ev).__name__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
