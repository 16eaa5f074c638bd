"""The network front: from a client's bytes to a handler and back (docs/design.md section 1).

- ``server``: the trio shell: listeners, one task per connection, frames in, replies out in order,
  the timers;
- ``dispatcher``: a frame -> header, version check, decode -> the handler -> the encoded reply.

The handlers, what they may touch (``handlers/context.py``) and what they may know of their
connection (``handlers/peer.py``) are ``broker/handlers/``; the reply types every service and
handler shares are ``broker/reply.py``; the composition root is ``broker/app.py``.
"""
