// A Pub/Sub server for the tests: Google's own in-memory server (pstest, from the Go client
// library, the same gRPC API as the service) on a port, with a small HTTP side that creates
// topics and lists what was published. It prints "grpc <port>" and "http <port>" once it listens.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
)

type message struct {
	ID          string            `json:"id"`
	Data        []byte            `json:"data"`
	Attributes  map[string]string `json:"attributes"`
	OrderingKey string            `json:"ordering_key"`
}

func main() {
	grpcPort := flag.Int("grpc", 0, "the gRPC port (0: any)")
	flag.Parse()
	srv := pstest.NewServerWithPort(*grpcPort)
	defer srv.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/topics", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: body.Name}); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("/messages", func(w http.ResponseWriter, r *http.Request) {
		out := []message{}
		for _, m := range srv.Messages() {
			out = append(out, message{ID: m.ID, Data: m.Data, Attributes: m.Attributes, OrderingKey: m.OrderingKey})
		}
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, grpc, _ := net.SplitHostPort(srv.Addr)
	fmt.Printf("grpc %s\nhttp %d\n", grpc, listener.Addr().(*net.TCPAddr).Port)
	if err := http.Serve(listener, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
