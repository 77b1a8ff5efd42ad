module oz0/forwarder

go 1.22
