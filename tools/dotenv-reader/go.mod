module example.invalid/hikyo-devtools/dotenv-reader

go 1.26.7

require (
	github.com/compose-spec/compose-go/v2 v2.16.0
	github.com/sirupsen/logrus v1.10.1
)

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
