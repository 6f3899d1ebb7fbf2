module github.com/siteline/outbox

go 1.26
