"""Storage: the data directory as the services use it, and the one durability path.

- ``store``: ``Storage`` (append, commit, close) and the cluster id;
- ``flusher``: ``FlushScheduler``, the group commit that is the only code fsyncing a partition
  while the broker serves, with ``Commit`` (appends waiting to be durable) and ``DataArrived``
  (wakes long-polling fetches when a high watermark moves);
- ``lock``: the data dir's exclusive lock;
- ``syncfs``: one ``syncfs(2)`` that makes a clean close's many small files durable together.

The files themselves (segments, indexes, producer state, recovery) are ``broker/log``'s.
"""

from broker.storage.flusher import Commit, DataArrived, FlushScheduler
from broker.storage.lock import DataDirLock, DataDirLocked, lock_data_dir
from broker.storage.store import Storage, load_cluster_id

__all__ = ["Commit", "DataArrived", "DataDirLock", "DataDirLocked", "FlushScheduler", "Storage",
           "load_cluster_id", "lock_data_dir"]
