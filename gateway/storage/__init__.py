"""What the gateway keeps in its database: the engine (:mod:`~gateway.storage.db`), the tables
(:mod:`~gateway.storage.tables`), the stored responses' owners (:mod:`~gateway.storage.response_owners`),
uploaded files (:mod:`~gateway.storage.files`), batches (:mod:`~gateway.storage.batches`) and the
schema's migrations (:mod:`~gateway.storage.migrations`)."""
