# paxlockd in an image with nothing else in it: the static binary built by
# `make docker-image` (CGO_ENABLED=0), which also prepares the build context
# (bin/docker: the binary and an empty data directory). No base image is
# pulled.
#
#   make docker-image
#   docker run --rm -v $PWD/node.json:/etc/paxlock/paxlockd.json:ro \
#       -v paxlock-data:/var/lib/paxlock -p 7101:7101 -p 7201:7201 -p 7301:7301 \
#       paxlock/paxlockd:dev
#
# The configuration's data_dir should be /var/lib/paxlock (a volume, owned
# by the unprivileged user the node runs as) and its addresses should bind
# an interface the container has (0.0.0.0 or the container's own address).
FROM scratch
COPY --chown=0:0 paxlockd /usr/local/bin/paxlockd
COPY --chown=65532:65532 data/ /var/lib/paxlock/
USER 65532:65532
VOLUME ["/var/lib/paxlock"]
# client, peer (Paxos), admin (HTTP) and gossip, as in the example configs
EXPOSE 7101 7201 7301 7401 7401/udp
ENTRYPOINT ["/usr/local/bin/paxlockd"]
CMD ["-config", "/etc/paxlock/paxlockd.json"]
