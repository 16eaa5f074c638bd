"""The network front: from a client's bytes to a handler and back (docs/design.md section 1).

- ``server``: the trio shell: listeners, one task per connection, frames in, replies out in order,
  the timers;
- ``dispatcher``: a frame -> header, version check, decode -> the handler -> the encoded reply;
- ``peer``: what a handler may know of the connection its request came on (address, session);
- ``context``: ``Broker``, what a handler may touch: the services the composition root built;
- ``reply``: the reply types (``Deferred``, ``AnswerFirst``) that handlers and services return.
  It imports nothing of ours, so the services return them without importing the shell.

The handlers themselves are ``broker/handlers/``; the composition root is ``broker/app.py``.
"""
