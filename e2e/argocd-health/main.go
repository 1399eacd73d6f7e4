// argocd-health runs an Argo CD resource health check (Lua) on the object read as JSON from
// stdin, the way Argo CD runs one: gopher-lua, the object as the global `obj` (maps and lists as
// tables), the script's returned table read for `status` and `message`. Prints one line:
// "<status> <message>". For the e2e tests; built by e2e/scripts/build-k8s.sh; not tether code.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
)

// toLua converts a decoded JSON value as Argo CD's decodeValue does.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		t := l.NewTable()
		for i, item := range v {
			t.RawSetInt(i+1, toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.NewTable()
		for k, item := range v {
			t.RawSetString(k, toLua(l, item))
		}
		return t
	default:
		return lua.LString(fmt.Sprint(v))
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health <script.lua> < object.json")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the script:", err)
		os.Exit(2)
	}
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the object:", err)
		os.Exit(2)
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		fmt.Fprintln(os.Stderr, "decoding the object:", err)
		os.Exit(2)
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	// The libraries Argo CD opens for health scripts.
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.fn), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			fmt.Fprintln(os.Stderr, "opening", lib.name, err)
			os.Exit(2)
		}
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(string(script)); err != nil {
		fmt.Fprintln(os.Stderr, "running the script:", err)
		os.Exit(1)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		fmt.Fprintln(os.Stderr, "the script returned no table")
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message")))
}
