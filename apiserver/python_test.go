package apiserver

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPythonClient runs the Python client's tests (clients/python/tests)
// against the shared cluster's API listeners, through two nodes, and
// fails with their output when any fails. It skips where there is no
// python3.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine")
	}
	c := cluster(t)
	var urls []string
	for _, a := range c.apis {
		urls = append(urls, "http://"+a.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = "../clients/python"
	cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1",
		"PAXLOCK_API_URLS="+strings.Join(urls, ","), "PAXLOCK_NAMESPACE="+testNS, "PAXLOCK_SECRET="+testSecret)
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped=") {
		t.Fatal("the Python client's tests were skipped")
	}
}
