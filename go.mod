module github.com/quotakit/throttle

go 1.25.0
