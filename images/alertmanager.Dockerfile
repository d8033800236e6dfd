# syntax=docker/dockerfile:1
# Alertmanager image tensorfusion/alertmanager-debian (docs/images.md): Debian's
# prometheus-alertmanager package, laid out as the chart's alert.image expects (entry point
# /bin/alertmanager, data in /alertmanager, user 65534). Built by `make images BASE=debian`,
# where the chart's default image (quay.io/prometheus/alertmanager) cannot be pulled.
ARG ALERTMANAGER_BASE=localhost/tensorfusion/debian-alertmanager:bookworm
FROM ${ALERTMANAGER_BASE}
ARG VERSION=0.25.0
LABEL org.opencontainers.image.title="alertmanager-debian" \
      org.opencontainers.image.description="Debian's prometheus-alertmanager for the TensorFusion chart" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN ln -s /usr/bin/prometheus-alertmanager /usr/bin/alertmanager \
    && mkdir -p /alertmanager /etc/alertmanager \
    && chown 65534:65534 /alertmanager \
    && alertmanager --version
USER 65534:65534
WORKDIR /alertmanager
EXPOSE 9093 9094
ENTRYPOINT ["/bin/alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
