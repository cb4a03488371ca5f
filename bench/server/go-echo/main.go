// Minimal gorilla/websocket echo server: the Go peer in the wsload-server benchmark.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/gorilla/websocket"
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 4096,
	// Match wsload-server: no permessage-deflate, any origin (the benchmark client sends none).
	EnableCompression: false,
	CheckOrigin:       func(*http.Request) bool { return true },
}

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		mt, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			return
		}
	}
}

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "listen address")
	flag.Parse()
	http.HandleFunc("/", echo)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
