package testutil

import "go.uber.org/goleak"

// GnetPoolGoroutines are goleak options that ignore the two goroutines of
// gnet's default worker pool (ants): gnet starts them when the package is
// loaded and they live for the process, so they are not a test's leak.
func GnetPoolGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	}
}
