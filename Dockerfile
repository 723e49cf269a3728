# The threadbox server image (for docker-compose.yml). The sandbox image is
# separate: sandbox/Dockerfile or `make sandbox-image`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/threadbox ./cmd/threadbox \
 && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/threadbox-agent ./cmd/threadbox-agent

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates e2fsprogs && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/threadbox /usr/local/bin/threadbox
COPY --from=build /out/threadbox-agent /usr/local/lib/threadbox/threadbox-agent
ENV THREADBOX_AGENT_BIN=/usr/local/lib/threadbox/threadbox-agent
ENTRYPOINT ["threadbox"]
CMD ["serve"]
