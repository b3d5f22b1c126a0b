package mysqlfence_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/tenure-io/tenure/fence/mysqlfence"
)

// mariadbClient returns the command-line client, failing t when there is
// none (.ci/run has it: Debian's mariadb-client).
func mariadbClient(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"mariadb", "mysql"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("neither mariadb nor mysql (the command-line client) is on PATH: apt-get install mariadb-client")
	return ""
}

// TestCommandLineClient fences transactions from the mariadb command-line
// client alone, as a shell script would: no Go in the path of the SQL.
// The stale transaction writes first and fences after (the wrong order,
// on purpose): the fence's error stops the client, which disconnects,
// and the server rolls the open transaction back, its write included.
func TestCommandLineClient(t *testing.T) {
	t.Parallel()
	client := mariadbClient(t)
	d := newDB(t)
	d.install(t, mysqlfence.DefaultConfig())
	d.exec(t, "CREATE TABLE reports (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB")
	cfg, err := mysql.ParseDSN(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, ok := strings.Cut(cfg.Addr, ":")
	if !ok {
		port = "3306"
	}
	run := func(script string) (string, error) {
		args := []string{"--no-defaults", "--batch", "-h", host, "-P", port, "-u", cfg.User}
		if cfg.Passwd != "" {
			args = append(args, "-p"+cfg.Passwd)
		}
		cmd := exec.Command(client, append(args, d.name)...)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		t.Logf("%s\n-> %v\n%s", script, err, out)
		return string(out), err
	}
	write := func(token int, body string) string {
		return fmt.Sprintf(`START TRANSACTION;
INSERT INTO reports VALUES (1, '%[2]s') ON DUPLICATE KEY UPDATE body = VALUES(body);
CALL tenure_fence('reports/daily', %[1]d);
INSERT INTO reports VALUES (2, '%[2]s') ON DUPLICATE KEY UPDATE body = VALUES(body);
COMMIT;
`, token, body)
	}
	if out, err := run(write(10, "ten")); err != nil {
		t.Fatalf("the write with token 10: %v\n%s", err, out)
	}
	out, err := run(write(9, "nine"))
	if err == nil || !strings.Contains(out, "ERROR 1644 (TF001)") || !strings.Contains(out, "stale token 9 for 'reports/daily': a write with token 10 was accepted") {
		t.Fatalf("the stale write: err %v, output:\n%s", err, out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("the client's exit: %v; want status 1", err)
	}
	// Locking reads wait until the server has rolled the stale
	// transaction back and released its row locks; then they read the
	// rows as committed last.
	out, err = run("START TRANSACTION; SELECT id, body FROM reports ORDER BY id FOR UPDATE; SELECT HEX(resource), token FROM tenure_fences FOR UPDATE; COMMIT;")
	if err != nil {
		t.Fatal(err)
	}
	want := "id\tbody\n1\tten\n2\tten\nHEX(resource)\ttoken\n7265706F7274732F6461696C79\t10\n"
	if out != want {
		t.Fatalf("after the stale transaction:\n%s\nwant (the write before the fence rolled back):\n%s", out, want)
	}
}
