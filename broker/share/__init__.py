"""Share groups (KIP-932): members sharing partitions, records acquired, acknowledged and
redelivered one by one.

- ``partition_state.py``: the share-partition state machine (pure, time as an argument): the
  share-partition start offset, in-flight records by ranges, locks, delivery counts.
- ``group.py``: the share-group coordinator (pure): members, epochs, the simple assignor, timeouts.
- ``sessions.py``: share sessions (the partitions a member fetches, session epochs).
- ``state_log.py``: the records of ``__share_group_state`` (Kafka's share-coordinator shapes).
- ``service.py``: the shell joining them to the storage (reads, the state log, replay, waiting).
"""
