// kstatus prints the kstatus verdict (Current, InProgress, Failed, ...) of the object read as
// JSON from stdin, as one line: "<status> <message>".
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the object:", err)
		os.Exit(2)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		fmt.Fprintln(os.Stderr, "decoding the object:", err)
		os.Exit(2)
	}
	res, err := status.Compute(obj)
	if err != nil {
		fmt.Fprintln(os.Stderr, "computing its status:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", res.Status, res.Message)
}
