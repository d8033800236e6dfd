// Regenerates template_golden.json from template_cases.json with Go's own text/template.
//
//	cd tests/unit/alerting/golden && go run gen_templates.go
//
// Each data value is a pair [type, value] so that Go sees the same types as our renderer:
// "int" (int64 from the driver), "float" (float64, "NaN"/"+Inf"/"-Inf" as strings),
// "string", "bool", "null" (a NULL column: nil).
package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"text/template"
)

type testCase struct {
	Name     string                     `json:"name"`
	Template string                     `json:"template"`
	Data     map[string][2]json.RawMessage `json:"data"`
}

type result struct {
	Output string `json:"output"`
	Error  bool   `json:"error"`
	Stage  string `json:"stage,omitempty"`
}

func decode(pair [2]json.RawMessage) any {
	var kind string
	_ = json.Unmarshal(pair[0], &kind)
	switch kind {
	case "int":
		var v int64
		_ = json.Unmarshal(pair[1], &v)
		return v
	case "float":
		var s string
		if json.Unmarshal(pair[1], &s) == nil {
			switch s {
			case "NaN":
				return math.NaN()
			case "+Inf":
				return math.Inf(1)
			case "-Inf":
				return math.Inf(-1)
			}
		}
		var v float64
		_ = json.Unmarshal(pair[1], &v)
		return v
	case "string":
		var v string
		_ = json.Unmarshal(pair[1], &v)
		return v
	case "bool":
		var v bool
		_ = json.Unmarshal(pair[1], &v)
		return v
	case "list":
		var raw [][2]json.RawMessage
		_ = json.Unmarshal(pair[1], &raw)
		out := make([]any, len(raw))
		for i, item := range raw {
			out[i] = decode(item)
		}
		return out
	}
	return nil
}

func main() {
	raw, err := os.ReadFile("template_cases.json")
	if err != nil {
		panic(err)
	}
	var cases []testCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		panic(err)
	}
	results := map[string]result{}
	for _, c := range cases {
		data := map[string]any{}
		for k, v := range c.Data {
			data[k] = decode(v)
		}
		tmpl, err := template.New(c.Name).Parse(c.Template)
		if err != nil {
			results[c.Name] = result{Error: true, Stage: "parse"}
			continue
		}
		var out strings.Builder
		if err := tmpl.Execute(&out, data); err != nil {
			results[c.Name] = result{Error: true, Stage: "execute"}
			continue
		}
		results[c.Name] = result{Output: out.String()}
	}
	encoded, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile("template_golden.json", append(encoded, '\n'), 0o644); err != nil {
		panic(err)
	}
}
