module github.com/streaming-hub/streaming-hub/sdk/go

go 1.22

require gopkg.in/validator.v2 v2.0.1
