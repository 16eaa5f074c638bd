"""The network front: from a client's bytes to a handler and back (docs/design.md section 1).

- ``server``: the trio shell: listeners, one task per connection, frames in, replies out in order,
  the timers;
- ``dispatcher``: a frame -> header, version check, decode -> the handler -> the encoded reply;
- ``sockets``: a plain connection's socket (receive, send, sendfile) on trio's readiness waits;
- ``limits``: what the listeners admit (connection counts, the queued request bytes);
- ``memory``: the collector's settings and the memory given back after connections close.

The handlers, what they may touch (``handlers/context.py``) and what they may know of their
connection (``handlers/peer.py``) are ``broker/handlers/``; the reply types every service and
handler shares are ``broker/reply.py``; the composition root is ``broker/app.py``.
"""
