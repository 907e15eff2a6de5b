module github.com/streaming-hub/streaming-hub/sdk/go

go 1.22
