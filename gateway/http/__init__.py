"""The HTTP edge: the route table's handlers, authentication dependencies, the one middleware
(:mod:`.edge`: header guard, request id, drain, metrics, access log) and error rendering."""
