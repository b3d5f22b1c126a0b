package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/redisfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

func ExampleFence_Set() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: storetest.RedisAddr()})
	defer rdb.Close()
	// A prefix of the example's own; a program keeps the default,
	// "tenure:fence:".
	prefix := storetest.Name("tenure-example:") + ":"
	f, err := redisfence.New(rdb, redisfence.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	// The key carries the resource's hash tag, as Redis Cluster needs.
	key := prefix + "reports:{reports/daily}:latest"
	defer rdb.Del(ctx, key, f.FenceKey("reports/daily"))

	fmt.Println(f.Set(ctx, fence.Grant("reports/daily", 7), key, "from token 7", 0))
	fmt.Println(f.Set(ctx, fence.Grant("reports/daily", 8), key, "from token 8", 0))
	err = f.Set(ctx, fence.Grant("reports/daily", 7), key, "late, from token 7", 0)
	fmt.Println(errors.Is(err, fence.ErrStale), err)
	fmt.Println(rdb.Get(ctx, key).Val())
	// Output:
	// <nil>
	// <nil>
	// true fence: stale token 7 for "reports/daily": a write with token 8 was accepted
	// from token 8
}
