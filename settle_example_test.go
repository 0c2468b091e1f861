package throttle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotakit/throttle"
)

// chatRequest is the body of an OpenAI-style chat completion request.
type chatRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// promptTokens is a rough count of a prompt's tokens: a token is about
// four characters of English.
func promptTokens(req chatRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content)/4 + 4
	}
	return n
}

// fakeLLM answers like an OpenAI-style chat completion API: the answer
// reports the tokens it used, its prompt's and the completion's, in
// usage.
func fakeLLM() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompt := promptTokens(req)
		completion := min(req.MaxTokens, 3*prompt) // a short answer
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"..."}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			prompt, completion, prompt+completion)
	}))
}

// An LLM API limits the tokens a key uses a minute, and says how many a
// request used only in its answer. Each request is charged an estimate
// when it is decided (its prompt and the most it may generate,
// max_tokens), so the fleet never overruns the quota, and the charge is
// settled to the usage the answer reports when the body has been read:
// the tokens not used go back to the quota at once.
func ExampleSettleFromJSON() {
	llm := fakeLLM()
	defer llm.Close()

	policy := throttle.Policy{Rules: []throttle.Rule{{
		Name: "llm", Path: "/v1/chat/completions",
		Limits: []throttle.Limit{{Name: "tokens", Rate: 30_000, Per: time.Minute}},
		// The estimate: the prompt's tokens and the most the answer may
		// use. GetBody reads the request body without taking it.
		Cost: func(r *http.Request) int {
			var req chatRequest
			if r.GetBody == nil {
				return 4096
			}
			body, err := r.GetBody()
			if err != nil || json.NewDecoder(body).Decode(&req) != nil {
				return 4096
			}
			return promptTokens(req) + req.MaxTokens
		},
		Settle: throttle.SettleFromJSON("usage.total_tokens"),
	}}}
	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(throttle.Hooks{
		OnSettle: func(ev throttle.SettleEvent) {
			fmt.Printf("charged %d tokens when sent, settled to %d\n", ev.Charged, ev.Cost)
		},
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: t}

	for _, prompt := range []string{"Say hi.", "Summarize the plot of Hamlet in two sentences."} {
		body := fmt.Sprintf(`{"model":"small","max_tokens":1000,"messages":[{"role":"user","content":%q}]}`, prompt)
		resp, err := client.Post(llm.URL+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
		if err != nil {
			panic(err)
		}
		var answer struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close() // the charge is settled by now
		if err != nil {
			panic(err)
		}
		fmt.Printf("the answer used %d tokens\n", answer.Usage.TotalTokens)
	}
	// Output:
	// charged 1005 tokens when sent, settled to 20
	// the answer used 20 tokens
	// charged 1015 tokens when sent, settled to 60
	// the answer used 60 tokens
}

// An SDK call outside HTTP is metered the same way with a Limiter: wait
// for the estimate, make the call, and settle the permit to the usage the
// answer reports.
func ExamplePermit_Settle() {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name:   "llm",
		Limits: []throttle.Limit{{Name: "tokens", Rate: 30_000, Per: time.Minute}},
	}}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	const maxTokens = 1000
	p, err := lim.WaitN(ctx, "llm", 12+maxTokens) // the prompt's tokens and max_tokens
	if err != nil {
		panic(err)
	}
	used := 12 + 85 // what the SDK's answer reports it used
	if err := p.Settle(ctx, used); err != nil {
		fmt.Println("the estimate stays charged:", err)
	}
	p.Done()
	// What the estimate did not use is back at once.
	if _, err := lim.AllowN(ctx, "llm", 30_000-used); err == nil {
		fmt.Printf("settled to %d tokens: %d more admitted at once\n", used, 30_000-used)
	}
	// Output:
	// settled to 97 tokens: 29903 more admitted at once
}
