module example.invalid/hikyo-devtools/pause

go 1.26.0
