"""Mail arriving at the service: inbound routes and their endpoints, storing and forwarding
accepted mail, bounces (DSNs), spam complaints (ARF) and return-path addresses."""
