# paxlockd in an image with nothing else in it, FROM scratch: no base
# image is pulled. It packages the static binary that `make static`
# builds into bin/docker/ (CGO_ENABLED=0), so build it first:
#
#   make static && docker build -t paxlock/paxlockd:dev .     (make docker-image)
#   docker run --rm -v $PWD/node.json:/etc/paxlock/paxlockd.json:ro \
#       -v paxlock-data:/var/lib/paxlock -p 7101:7101 -p 7201:7201 -p 7301:7301 \
#       paxlock/paxlockd:dev
#
# The configuration's data_dir should be /var/lib/paxlock (a volume, owned
# by the unprivileged user the node runs as) and its addresses should bind
# an interface the container has (0.0.0.0 or the container's own address;
# bind_host 0.0.0.0 where the nodes list names hosts). The health check
# asks the node for /healthz on its own admin address (paxlockd -health): with a
# configuration elsewhere than /etc/paxlock/paxlockd.json, override it
# (docker run --health-cmd, or healthcheck in Compose as
# deploy/docker-compose.yml does).
FROM scratch
COPY --chown=0:0 bin/docker/paxlockd /usr/local/bin/paxlockd
COPY --chown=65532:65532 bin/docker/data/ /var/lib/paxlock/
USER 65532:65532
VOLUME ["/var/lib/paxlock"]
# client, peer (Paxos), admin (HTTP) and gossip, as in the example configs
EXPOSE 7101 7201 7301 7401 7401/udp
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/paxlockd", "-config", "/etc/paxlock/paxlockd.json", "-health", "healthz"]
ENTRYPOINT ["/usr/local/bin/paxlockd"]
CMD ["-config", "/etc/paxlock/paxlockd.json"]
