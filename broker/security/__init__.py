"""Authentication and authorization (docs/security.md).

- ``tls``: the server's ``ssl.SSLContext`` from Kafka's PEM settings, the principal of a client
  certificate.
- ``sasl``: the server side of PLAIN and SCRAM-SHA-256/512, one ``SaslServer`` per connection.
- ``scram``: SCRAM credentials, stored salted in the data directory.
- ``acl``: ACL bindings and the pure ``Authorizer`` (Kafka's rules); ``AclStore`` keeps them on disk.
- ``durable_json``: the one way these small state files are written (atomic, fsynced).
"""
