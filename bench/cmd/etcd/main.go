// Command etcd is the etcd server of the version this module requires
// (go.etcd.io/etcd/server/v3), built from source so that the benchmarks
// compare tenure with a known etcd release.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
