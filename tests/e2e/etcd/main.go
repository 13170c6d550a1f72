// Command etcd is upstream etcd's server entry point (go.etcd.io/etcd/server/v3/etcdmain),
// built from the Go module proxy for the vramgate e2e control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
