"""The JSON record of each row the API answers with: one builder per record shape
(chalicelib/response_shapes), checked by ``@builds``. Handlers turn rows into records here and
nowhere else; results the services compute (a render, statistics, a test send) are shaped
by the service that computes them."""
