"""The gateway's commands (typer): ``keys`` (:mod:`.keys`), ``groups``, ``batches`` and ``files``
(:mod:`.batches`), ``db``, ``token`` (:mod:`.main`) and the reads (usage, audit, requests, status:
:mod:`.reads`) on the database or a running gateway's admin API, and ``serve``'s server
(:mod:`gateway.cli.serve`). :mod:`dspark_cli` mounts them in the one command line, on
:data:`gateway.cli.main.app`, importing only the module of the command a run names: this package
imports none of them itself."""
