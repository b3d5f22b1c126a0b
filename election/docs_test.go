package election_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The code blocks of docs/go-guide.md are the bodies of testable examples,
// so that the guide compiles and runs. Each block follows a comment naming
// its example, <!-- election/example_test.go ExampleRun -->, or a whole
// function, <!-- election/example_test.go func nightlyJob -->.
func TestGoGuideMatchesTheExamples(t *testing.T) {
	guide, err := os.ReadFile("../docs/go-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- (\\S+) (func )?(\\w+) -->\n```go\n(.*?)```\n").FindAllStringSubmatch(string(guide), -1)
	if n := strings.Count(string(guide), "```go\n"); n != len(blocks) || n < 5 {
		t.Fatalf("the guide has %d Go blocks, %d of them marked with their example; want all", n, len(blocks))
	}
	for _, b := range blocks {
		file, whole, name, code := b[1], b[2] != "", b[3], b[4]
		src, err := os.ReadFile("../" + file)
		if err != nil {
			t.Fatal(err)
		}
		want := exampleBody(string(src), name)
		if whole {
			want = function(string(src), name)
		}
		if code != want {
			t.Errorf("docs/go-guide.md: the block of %s differs from the example in %s:\n--- guide\n%s--- example\n%s", name, file, code, want)
		}
	}
}

// function returns the whole func name in src.
func function(src, name string) string {
	_, rest, ok := strings.Cut(src, "\nfunc "+name+"(")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n}\n")
	return "func " + name + "(" + body + "\n}\n"
}

// exampleBody returns the body of func name in src, without its Output
// comment, dedented by one tab.
func exampleBody(src, name string) string {
	_, rest, ok := strings.Cut(src, "\nfunc "+name+"() {\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n}\n")
	var out strings.Builder
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "// Output:") {
			break
		}
		out.WriteString(strings.TrimPrefix(l, "\t") + "\n")
	}
	return strings.TrimRight(out.String(), "\n") + "\n"
}
